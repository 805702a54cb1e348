// Fused attention (flash-attention style, on CUDA cores): tiles of 32 keys and values are staged
// in shared memory; a warp takes a query row, its lanes one key each, and keeps the row's
// running max, sum and output in registers. Backward recomputes the probabilities from lse in
// two kernels without atomics: one per query block for dq, one per key block for dk and dv
// (there the lanes take query rows).
// Head dims up to 128; arithmetic in float (double for float64). That is the "simt" variant; the
// "mma" variant (the default, used where it applies) runs float16/bfloat16 on tensor cores.
#include <memgrad/core/variants_impl.h>
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

namespace {

constexpr int kTile = 32;                   // keys per shared-memory tile: one per lane
constexpr int kMaxHead = 128;               // head dim limit: 4 elements per lane
constexpr int kPerLane = kMaxHead / kTile;  // output elements a lane owns (d = lane + 32 e)
constexpr int kWarps = 4;                   // warps per block in the query-row kernels
constexpr unsigned kFull = 0xffffffffu;

template <class A>
__device__ __forceinline__ A neg_inf() {
  return A(-INFINITY);
}

// Rows [r0, r0 + n) of the row-major [rows_total, D] matrix at src into dst with row pitch
// `pitch`, widened to A; rows past rows_total read as 0. All threads of the block (or of one
// warp, with `threads` = 32 and `tid` its lane) take part.
template <class T, class A>
__device__ void stage_rows(const T* src, int64_t r0, int n, int64_t rows_total, int D, A* dst, int pitch, int tid,
                           int threads) {
  for (int e = tid; e < n * D; e += threads) {
    const int r = e / D, d = e % D;
    dst[r * pitch + d] = r0 + r < rows_total ? A(dload(src[(r0 + r) * D + d])) : A(0);
  }
}

// Row pitch of shared tiles that lanes read row-wise: odd, so 32 rows fall in 32 banks.
__host__ __device__ __forceinline__ int padded(int D) { return D | 1; }

template <class A>
__device__ __forceinline__ A dot(const A* a, const A* b, int D) {
  A s = 0;
  for (int d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

// acc[c] += sum over the tile's 32 rows kk of w_kk * tile[kk][lane + 32 c], where w_kk is lane kk's
// `w`: the lanes' per-row weights applied to the rows, each lane summing its share of the columns.
template <class A>
__device__ __forceinline__ void gather_rows(A (&acc)[kPerLane], A w, const A* tile, int pitch, int lane, int D) {
  for (int kk = 0; kk < kTile; ++kk) {
    const A wk = __shfl_sync(kFull, w, kk);
#pragma unroll
    for (int c = 0; c < kPerLane; ++c)
      if (lane + 32 * c < D) acc[c] += wk * tile[kk * pitch + lane + 32 * c];
  }
}

// Writes a lane's share (d = lane + 32 c) of a row kept in registers, times `scale`.
template <class T, class A>
__device__ __forceinline__ void store_row(T* row, const A (&acc)[kPerLane], A scale, int lane, int D) {
#pragma unroll
  for (int c = 0; c < kPerLane; ++c)
    if (lane + 32 * c < D) row[lane + 32 * c] = dstore<T>(acc[c] * scale);
}

// 1 / (1 - p) where dropout keeps probability (bh, i, j), else 0; 1 without dropout.
template <class A>
__device__ __forceinline__ A keep_scale(const AttentionParams& p, int64_t bh, int64_t i, int64_t j, int64_t Tq,
                                        int64_t Tk) {
  if (p.dropout_p == 0) return A(1);
  const uint64_t n = uint64_t((bh * Tq + i) * Tk + j);
  return random_uniform(p.seed, p.offset, n) >= float(p.dropout_p) ? A(1.0 / (1.0 - p.dropout_p)) : A(0);
}

__device__ __forceinline__ bool sees(const AttentionParams& p, int64_t i, int64_t j, int64_t Tk) {
  return j < Tk && (!p.causal || j <= i);
}

// Whether query i of head bh sees key j (in range, causal, a bool mask), and in `add` what an
// additive mask adds to its score. `mask` holds T for additive masks.
template <class T, class A>
__device__ __forceinline__ bool visible(const AttentionParams& p, const void* mask, int64_t bh, int64_t i, int64_t j,
                                        int64_t Tk, A* add) {
  *add = A(0);
  if (!sees(p, i, j, Tk)) return false;
  using Kind = AttentionMask::Kind;
  if (p.mask.kind == Kind::None) return true;
  const int64_t off = p.mask.offset(bh, i, j);
  if (p.mask.kind == Kind::Bool) return static_cast<const bool*>(mask)[off];
  *add = A(dload(static_cast<const T*>(mask)[off]));
  return true;
}

// One block: kWarps * R query rows of head bh against every visible key tile.
template <class T, class A, int R>
__global__ void attention_forward_kernel(const T* q, const T* k, const T* v, const void* mask, T* out, A* lse,
                                         int64_t Tq, int64_t Tk, int D, int64_t row_blocks, AttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* q_sh = reinterpret_cast<A*>(smem_raw);  // [kWarps * R][D]
  A* k_sh = q_sh + kWarps * R * D;           // [kTile][padded(D)]: lanes read rows
  A* v_sh = k_sh + kTile * padded(D);        // [kTile][D]: lanes read columns
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, rows = kWarps * R;
  const int64_t bh = blockIdx.x / row_blocks, i0 = blockIdx.x % row_blocks * rows;
  const T *qh = q + bh * Tq * D, *kh = k + bh * Tk * D, *vh = v + bh * Tk * D;
  stage_rows(qh, i0, rows, Tq, D, q_sh, D, threadIdx.x, blockDim.x);

  A m[R], l[R], acc[R][kPerLane];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = neg_inf<A>();
    l[r] = 0;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[r][e] = 0;
  }
  const int64_t last_row = min(i0 + rows, Tq) - 1, key_end = p.causal ? min(Tk, last_row + 1) : Tk;
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and q_sh written, the first time)
    stage_rows(kh, j0, kTile, Tk, D, k_sh, padded(D), threadIdx.x, blockDim.x);
    stage_rows(vh, j0, kTile, Tk, D, v_sh, D, threadIdx.x, blockDim.x);
    __syncthreads();
    const int64_t j = j0 + lane;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = warp * R + r;
      const int64_t i = i0 + row;
      if (i >= Tq) continue;  // uniform across the warp
      A add;
      const bool valid = visible<T>(p, mask, bh, i, j, Tk, &add);
      const A s = valid ? A(p.scale) * dot(q_sh + row * D, k_sh + lane * padded(D), D) + add : neg_inf<A>();
      const A m_new = max(m[r], warp_reduce(s, [](A a, A b) { return max(a, b); }));
      if (m_new == neg_inf<A>()) continue;  // no visible key yet (uniform: a reduced value)
      const A alpha = exp(m[r] - m_new), e = valid ? exp(s - m_new) : A(0);
      l[r] = l[r] * alpha + warp_reduce(e, SumOp{});
      const A pd = valid ? e * keep_scale<A>(p, bh, i, j, Tq, Tk) : A(0);
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) acc[r][c] *= alpha;
      gather_rows(acc[r], pd, v_sh, D, lane, D);
      m[r] = m_new;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t i = i0 + warp * R + r;
    if (i >= Tq) continue;
    store_row(out + (bh * Tq + i) * D, acc[r], l[r] > 0 ? A(1) / l[r] : A(0), lane, D);
    if (lane == 0) lse[bh * Tq + i] = l[r] > 0 ? m[r] + log(l[r]) : neg_inf<A>();
  }
}

// delta[row] = sum_d grad_out[row, d] * out[row, d]: a warp per row.
template <class T, class A>
__global__ void attention_delta_kernel(const T* grad_out, const T* out, A* delta, int64_t rows, int D) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; row < rows;
       row += int64_t(gridDim.x) * blockDim.x / 32) {
    A s = 0;
    for (int d = lane; d < D; d += 32) s += A(dload(grad_out[row * D + d])) * A(dload(out[row * D + d]));
    s = warp_reduce(s, SumOp{});
    if (lane == 0) delta[row] = s;
  }
}

// The gradient of a query row's scores for the lane's key: ds = p * (dp - delta) * scale, with p
// recomputed from lse and dp = dO . v through the dropout mask. Also returns the dropped-out p.
template <class T, class A>
__device__ __forceinline__ A score_grad(const AttentionParams& p, const void* mask, const A* q_row, const A* do_row,
                                        const A* k_row, const A* v_row, A lse_i, A delta_i, int64_t bh, int64_t i,
                                        int64_t j, int64_t Tq, int64_t Tk, int D, A* p_dropped) {
  *p_dropped = 0;
  A add;
  if (!visible<T>(p, mask, bh, i, j, Tk, &add) || lse_i == neg_inf<A>()) return A(0);
  const A prob = exp(A(p.scale) * dot(q_row, k_row, D) + add - lse_i), keep = keep_scale<A>(p, bh, i, j, Tq, Tk);
  *p_dropped = prob * keep;
  return prob * (dot(do_row, v_row, D) * keep - delta_i) * A(p.scale);
}

// dq for kWarps * R query rows of head bh: dq_i = sum_j ds_ij k_j.
template <class T, class A, int R>
__global__ void attention_grad_q_kernel(const T* grad_out, const T* q, const T* k, const T* v, const void* mask,
                                        const A* lse, const A* delta, T* grad_q, int64_t Tq, int64_t Tk, int D,
                                        int64_t row_blocks, AttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int rows = kWarps * R;
  A* q_sh = reinterpret_cast<A*>(smem_raw);  // [rows][D]
  A* do_sh = q_sh + rows * D;                // [rows][D]
  A* k_sh = do_sh + rows * D;                // [kTile][padded(D)]
  A* v_sh = k_sh + kTile * padded(D);        // [kTile][padded(D)]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t bh = blockIdx.x / row_blocks, i0 = blockIdx.x % row_blocks * rows;
  stage_rows(q + bh * Tq * D, i0, rows, Tq, D, q_sh, D, threadIdx.x, blockDim.x);
  stage_rows(grad_out + bh * Tq * D, i0, rows, Tq, D, do_sh, D, threadIdx.x, blockDim.x);
  A acc[R][kPerLane];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[r][c] = 0;
  const int64_t last_row = min(i0 + rows, Tq) - 1, key_end = p.causal ? min(Tk, last_row + 1) : Tk;
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();
    stage_rows(k + bh * Tk * D, j0, kTile, Tk, D, k_sh, padded(D), threadIdx.x, blockDim.x);
    stage_rows(v + bh * Tk * D, j0, kTile, Tk, D, v_sh, padded(D), threadIdx.x, blockDim.x);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = warp * R + r;
      const int64_t i = i0 + row;
      if (i >= Tq) continue;
      A unused;
      const A ds =
          score_grad<T>(p, mask, q_sh + row * D, do_sh + row * D, k_sh + lane * padded(D), v_sh + lane * padded(D),
                        lse[bh * Tq + i], delta[bh * Tq + i], bh, i, j0 + lane, Tq, Tk, D, &unused);
      gather_rows(acc[r], ds, k_sh, padded(D), lane, D);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t i = i0 + warp * R + r;
    if (i >= Tq) continue;
    store_row(grad_q + (bh * Tq + i) * D, acc[r], A(1), lane, D);
  }
}

// dk and dv for kWarps * R keys of head bh: dk_j = sum_i ds_ij q_i, dv_j = sum_i p_ij keep dO_i. Tiles
// of 32 query rows (q, dO, lse, delta) are staged in shared memory; for each of its keys a warp
// takes a row per lane, then its lanes (over d) gather the 32 rows' terms by shuffles, so the
// sums stay in registers and are written once.
template <class T, class A, int R>
__global__ void attention_grad_kv_kernel(const T* grad_out, const T* q, const T* k, const T* v, const void* mask,
                                         const A* lse, const A* delta, T* grad_k, T* grad_v, int64_t Tq, int64_t Tk,
                                         int D, int64_t key_blocks, AttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int pitch = padded(D), keys = kWarps * R;
  A* q_sh = reinterpret_cast<A*>(smem_raw);  // [kTile][pitch]: lanes read rows, and columns
  A* do_sh = q_sh + kTile * pitch;           // [kTile][pitch]
  A* k_sh = do_sh + kTile * pitch;           // [keys][D]: every lane reads the same row
  A* v_sh = k_sh + keys * D;                 // [keys][D]
  A* lse_sh = v_sh + keys * D;               // [kTile]
  A* delta_sh = lse_sh + kTile;              // [kTile]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t bh = blockIdx.x / key_blocks, j0 = blockIdx.x % key_blocks * keys;
  stage_rows(k + bh * Tk * D, j0, keys, Tk, D, k_sh, D, threadIdx.x, blockDim.x);
  stage_rows(v + bh * Tk * D, j0, keys, Tk, D, v_sh, D, threadIdx.x, blockDim.x);
  A dk[R][kPerLane], dv[R][kPerLane];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) dk[r][c] = dv[r][c] = 0;
  // Causal: rows before the block's first key see none of its keys.
  for (int64_t i0 = p.causal ? j0 / kTile * kTile : 0; i0 < Tq; i0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and k_sh, v_sh written, the first time)
    stage_rows(q + bh * Tq * D, i0, kTile, Tq, D, q_sh, pitch, threadIdx.x, blockDim.x);
    stage_rows(grad_out + bh * Tq * D, i0, kTile, Tq, D, do_sh, pitch, threadIdx.x, blockDim.x);
    if (threadIdx.x < kTile) {
      const bool in = i0 + threadIdx.x < Tq;
      lse_sh[threadIdx.x] = in ? lse[bh * Tq + i0 + threadIdx.x] : neg_inf<A>();
      delta_sh[threadIdx.x] = in ? delta[bh * Tq + i0 + threadIdx.x] : A(0);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int key = warp * R + r;
      A pd;  // rows past Tq have lse -inf: ds = pd = 0
      const A ds = score_grad<T>(p, mask, q_sh + lane * pitch, do_sh + lane * pitch, k_sh + key * D, v_sh + key * D,
                                 lse_sh[lane], delta_sh[lane], bh, i0 + lane, j0 + key, Tq, Tk, D, &pd);
      gather_rows(dk[r], ds, q_sh, pitch, lane, D);
      gather_rows(dv[r], pd, do_sh, pitch, lane, D);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t j = j0 + warp * R + r;
    if (j >= Tk) continue;
    store_row(grad_k + (bh * Tk + j) * D, dk[r], A(1), lane, D);
    store_row(grad_v + (bh * Tk + j) * D, dv[r], A(1), lane, D);
  }
}

// Launches `kernel` with `smem` bytes of dynamic shared memory, opting in above the 48 KiB default.
template <class Kernel, class... Args>
void launch(const char* op, Kernel kernel, int64_t blocks, int threads, size_t smem, cudaStream_t s, Args... args) {
  if (blocks == 0) return;
  if (smem > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    MG_CHECK(e == cudaSuccess, DeviceError, op, ": ", smem,
             " bytes of shared memory unavailable: ", cudaGetErrorString(e));
  }
  MG_CHECK(blocks < (int64_t(1) << 31), NotImplementedError, op, ": ", blocks, " blocks exceed the grid limit");
  kernel<<<unsigned(blocks), threads, smem, s>>>(args...);
  check_launch(op);
}

void check_head_dim(const char* op, int64_t D) {
  MG_CHECK(D >= 1 && D <= kMaxHead, NotImplementedError, op, ": the cuda kernels take head dims 1 to ", kMaxHead,
           ", got ", D);
}

// The mask's first element on the device, or null.
const void* mask_data(const Tensor& mask) {
  if (!mask.defined()) return nullptr;
  return static_cast<const char*>(mask.storage()->data()) + mask.storage_offset() * int64_t(mask.element_size());
}

// ---- the "mma" variant: float16/bfloat16 on tensor cores (sm_80+), head dims a multiple of 16 up to
// 128. Flash-attention 2's schedule: a block of 4 warps takes 64 query rows (forward, dq) or 64 keys
// (dk, dv), each warp 16 of them, against tiles of 64 keys (or query rows) staged in shared memory.
// Every product is an mma.sync m16n8k16 with float accumulation, and comes in one of two shapes:
// scores (rows of one tile against rows of another: q k^T, dO v^T, k q^T, v dO^T) and
// accumulation (scores-shaped float fragments, rounded to 16 bits, times a tile: p v, ds k,
// p^T dO, ds^T q). The score fragment's layout is the next product's A-operand layout, so
// probabilities never leave registers. Masks, dropout and empty rows follow the simt kernels.
namespace mma {

constexpr int kRows = 64;  // query rows (or keys) per block: 4 warps x 16
constexpr int kTile = 64;  // keys (or query rows) per shared-memory tile: 8 mma column tiles
static_assert(kTile == kRows, "tile() and smem_bytes() count every tile as kRows rows");
constexpr int kN = kTile / 8;
using u16 = uint16_t;

// Row pitch of 16-bit shared tiles: 8 more than D, so the 8 rows a fragment load touches fall in
// distinct banks, and 32-bit pairs stay aligned.
__host__ __device__ __forceinline__ int pitch_of(int D) { return D + 8; }

template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {  // lo in the low half: the lower index
  if constexpr (std::is_same_v<T, BFloat16>) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

__device__ __forceinline__ uint32_t ld32(const u16* sh, int pitch, int row, int col) {
  return *reinterpret_cast<const uint32_t*>(sh + row * pitch + col);
}

// c += a (16 x 16, row-major fragment) * b (16 x 8, column-major fragment): PTX ISA, "Matrix
// fragments for mma.m16n8k16 with floating point type". Lane = 4 g + t holds a's rows g and g + 8,
// columns 2t, 2t + 1 (registers 0, 1) and those + 8 (registers 2, 3); b's column g, rows 2t, 2t + 1
// (register 0) and + 8 (register 1); c's rows g (c[0], c[1]) and g + 8 (c[2], c[3]), columns 2t, 2t + 1.
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, BFloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the host selects this variant on sm_80+ only
#endif
}

// Tile i of the block's shared memory: kRows rows of pitch_of(D) 16-bit elements each, one after another.
__device__ __forceinline__ u16* tile(int i, int D) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  return reinterpret_cast<u16*>(smem_raw) + i * kRows * pitch_of(D);
}

// Rows [r0, r0 + n) of a row-major [rows_total, D] 16-bit matrix into a shared tile; rows past
// rows_total read as 0 (so that a masked-out key's value is 0, never NaN). D is even: 32-bit words.
__device__ __forceinline__ void stage(const u16* src, int64_t r0, int n, int64_t rows_total, int D, u16* dst) {
  const int words = D / 2, pitch = pitch_of(D);
  for (int e = threadIdx.x; e < n * words; e += blockDim.x) {
    const int r = e / words, w = e % words;
    reinterpret_cast<uint32_t*>(dst + r * pitch)[w] =
        r0 + r < rows_total ? reinterpret_cast<const uint32_t*>(src + (r0 + r) * D)[w] : 0u;
  }
}

// s[n] = rows [row0, row0 + 16) of tile a times rows [8n, 8n + 8) of tile b, transposed: a 16 x 64 block
// of a b^T over the head dim.
template <class T, int kDMax>
__device__ __forceinline__ void scores(float (&s)[kN][4], const u16* a, int row0, const u16* b, int D) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, pitch = pitch_of(D);
#pragma unroll
  for (int n = 0; n < kN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
  for (int d0 = 0; d0 < kDMax; d0 += 16) {
    if (d0 >= D) break;
    const uint32_t af[4] = {ld32(a, pitch, row0 + g, d0 + 2 * t), ld32(a, pitch, row0 + g + 8, d0 + 2 * t),
                            ld32(a, pitch, row0 + g, d0 + 8 + 2 * t), ld32(a, pitch, row0 + g + 8, d0 + 8 + 2 * t)};
#pragma unroll
    for (int n = 0; n < kN; ++n)
      mma_16816<T>(s[n], af, ld32(b, pitch, 8 * n + g, d0 + 2 * t), ld32(b, pitch, 8 * n + g, d0 + 8 + 2 * t));
  }
}

// acc (16 x D) += w (16 x 64, score fragments, rounded to T) times the tile b (64 rows x D).
template <class T, int kDMax>
__device__ __forceinline__ void accumulate(float (&acc)[kDMax / 8][4], const float (&w)[kN][4], const u16* b, int D) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, pitch = pitch_of(D);
  auto pair = [&](int row, int col) {
    return uint32_t(b[row * pitch + col]) | uint32_t(b[(row + 1) * pitch + col]) << 16;
  };
#pragma unroll
  for (int kk = 0; kk < kN / 2; ++kk) {
    const uint32_t af[4] = {pack<T>(w[2 * kk][0], w[2 * kk][1]), pack<T>(w[2 * kk][2], w[2 * kk][3]),
                            pack<T>(w[2 * kk + 1][0], w[2 * kk + 1][1]), pack<T>(w[2 * kk + 1][2], w[2 * kk + 1][3])};
#pragma unroll
    for (int nd = 0; nd < kDMax / 8; ++nd) {
      if (8 * nd >= D) break;
      mma_16816<T>(acc[nd], af, pair(16 * kk + 2 * t, 8 * nd + g), pair(16 * kk + 8 + 2 * t, 8 * nd + g));
    }
  }
}

// Writes rows row0 + g and row0 + g + 8 (when below rows_total) of a 16 x D fragment, times scale[0]
// and scale[1], to the row-major [*, D] matrix dst.
template <class T, int kDMax>
__device__ __forceinline__ void store(u16* dst, const float (&acc)[kDMax / 8][4], int64_t row0, int64_t rows_total,
                                      int D, const float (&scale)[2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + g + 8 * h;
    if (row >= rows_total) continue;
#pragma unroll
    for (int nd = 0; nd < kDMax / 8; ++nd)
      if (8 * nd < D)
        *reinterpret_cast<uint32_t*>(dst + row * D + 8 * nd + 2 * t) =
            pack<T>(acc[nd][2 * h] * scale[h], acc[nd][2 * h + 1] * scale[h]);
  }
}

template <int kDMax>
__device__ __forceinline__ void zero(float (&acc)[kDMax / 8][4]) {
#pragma unroll
  for (int nd = 0; nd < kDMax / 8; ++nd) acc[nd][0] = acc[nd][1] = acc[nd][2] = acc[nd][3] = 0;
}

// Fragment element e of column tile n: its row (0..15 within the warp's 16) and column (0..63).
__device__ __forceinline__ int frag_row(int e) { return threadIdx.x % 32 / 4 + (e >= 2 ? 8 : 0); }
__device__ __forceinline__ int frag_col(int n, int e) { return 8 * n + 2 * (threadIdx.x % 4) + (e & 1); }

// Rows reduce over the 4 lanes of a quad (the lanes that hold one row's columns).
template <class Op>
__device__ __forceinline__ float quad_reduce(float v, Op op) {
  v = op(v, __shfl_xor_sync(kFull, v, 1));
  return op(v, __shfl_xor_sync(kFull, v, 2));
}

// The scaled, masked score of (i, j), or -inf where i does not see j (or is a padding row of the tile:
// its mask element does not exist).
template <class T>
__device__ __forceinline__ float masked(const AttentionParams& p, const void* mask, int64_t bh, int64_t i, int64_t j,
                                        int64_t Tq, int64_t Tk, float raw) {
  float add;
  return i < Tq && visible<T>(p, mask, bh, i, j, Tk, &add) ? float(p.scale) * raw + add : -INFINITY;
}

template <class T, int kDMax>
__global__ void __launch_bounds__(128)
    forward_kernel(const u16* q, const u16* k, const u16* v, const void* mask, u16* out, float* lse, int64_t Tq,
                   int64_t Tk, int D, int64_t row_blocks, AttentionParams p) {
  const int warp = threadIdx.x / 32;
  u16 *q_sh = tile(0, D), *k_sh = tile(1, D), *v_sh = tile(2, D);
  const int64_t bh = blockIdx.x / row_blocks, i0 = blockIdx.x % row_blocks * kRows, w0 = i0 + 16 * warp;
  stage(q + bh * Tq * D, i0, kRows, Tq, D, q_sh);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, o[kDMax / 8][4], s[kN][4];
  zero<kDMax>(o);
  const int64_t last_row = min(i0 + kRows, Tq) - 1, key_end = p.causal ? min(Tk, last_row + 1) : Tk;
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and q_sh written, the first time)
    stage(k + bh * Tk * D, j0, kTile, Tk, D, k_sh);
    stage(v + bh * Tk * D, j0, kTile, Tk, D, v_sh);
    __syncthreads();
    scores<T, kDMax>(s, q_sh, 16 * warp, k_sh, D);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = masked<T>(p, mask, bh, w0 + frag_row(e), j0 + frag_col(n, e), Tq, Tk, s[n][e]);
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
      }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_new = fmaxf(m[h], quad_reduce(tile_max[h], [](float a, float b) { return fmaxf(a, b); }));
      alpha[h] = m_new == -INFINITY ? 1.f : __expf(m[h] - m_new);  // no visible key yet: nothing to rescale
      m[h] = m_new;
      l[h] *= alpha[h];
    }
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const float pr = s[n][e] == -INFINITY ? 0.f : __expf(s[n][e] - m[h]);
        l[h] += pr;  // this lane's share of the row sum; the quad's are added at the end
        s[n][e] = pr == 0.f ? 0.f : pr * keep_scale<float>(p, bh, w0 + frag_row(e), j0 + frag_col(n, e), Tq, Tk);
      }
#pragma unroll
    for (int nd = 0; nd < kDMax / 8; ++nd)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[nd][e] *= alpha[e / 2];
    accumulate<T, kDMax>(o, s, v_sh, D);
  }
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = quad_reduce(l[h], SumOp{});
    inv[h] = l[h] > 0 ? 1.f / l[h] : 0.f;
    const int64_t i = w0 + frag_row(2 * h);
    if (threadIdx.x % 4 == 0 && i < Tq) lse[bh * Tq + i] = l[h] > 0 ? m[h] + __logf(l[h]) : -INFINITY;
  }
  store<T, kDMax>(out + bh * Tq * D, o, w0, Tq, D, inv);
}

// The probability of (i, j) from its raw score and the row's lse, and through the dropout mask
// `dp_raw` (dO . v) becomes ds = p (dp keep - delta) scale; `pd` gets p keep. 0 where i does not see j.
template <class T>
__device__ __forceinline__ float score_grad(const AttentionParams& p, const void* mask, int64_t bh, int64_t i,
                                            int64_t j, int64_t Tq, int64_t Tk, float raw, float dp_raw, float lse_i,
                                            float delta_i, float* pd) {
  const float s = masked<T>(p, mask, bh, i, j, Tq, Tk, raw);
  *pd = 0;
  if (s == -INFINITY || lse_i == -INFINITY) return 0;
  const float prob = __expf(s - lse_i), keep = keep_scale<float>(p, bh, i, j, Tq, Tk);
  *pd = prob * keep;
  return prob * (dp_raw * keep - delta_i) * float(p.scale);
}

// dq for 64 query rows: dq_i = sum_j ds_ij k_j.
template <class T, int kDMax>
__global__ void __launch_bounds__(128)
    grad_q_kernel(const u16* grad_out, const u16* q, const u16* k, const u16* v, const void* mask, const float* lse,
                  const float* delta, u16* grad_q, int64_t Tq, int64_t Tk, int D, int64_t row_blocks,
                  AttentionParams p) {
  const int warp = threadIdx.x / 32;
  u16 *q_sh = tile(0, D), *do_sh = tile(1, D), *k_sh = tile(2, D), *v_sh = tile(3, D);
  const int64_t bh = blockIdx.x / row_blocks, i0 = blockIdx.x % row_blocks * kRows, w0 = i0 + 16 * warp;
  stage(q + bh * Tq * D, i0, kRows, Tq, D, q_sh);
  stage(grad_out + bh * Tq * D, i0, kRows, Tq, D, do_sh);
  float lse_r[2], delta_r[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t i = w0 + frag_row(2 * h);
    lse_r[h] = i < Tq ? lse[bh * Tq + i] : -INFINITY;
    delta_r[h] = i < Tq ? delta[bh * Tq + i] : 0.f;
  }
  float dq[kDMax / 8][4], s[kN][4], dp[kN][4];
  zero<kDMax>(dq);
  const int64_t last_row = min(i0 + kRows, Tq) - 1, key_end = p.causal ? min(Tk, last_row + 1) : Tk;
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();
    stage(k + bh * Tk * D, j0, kTile, Tk, D, k_sh);
    stage(v + bh * Tk * D, j0, kTile, Tk, D, v_sh);
    __syncthreads();
    scores<T, kDMax>(s, q_sh, 16 * warp, k_sh, D);
    scores<T, kDMax>(dp, do_sh, 16 * warp, v_sh, D);
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pd;
        s[n][e] = score_grad<T>(p, mask, bh, w0 + frag_row(e), j0 + frag_col(n, e), Tq, Tk, s[n][e], dp[n][e],
                                lse_r[e / 2], delta_r[e / 2], &pd);
      }
    accumulate<T, kDMax>(dq, s, k_sh, D);
  }
  const float one[2] = {1.f, 1.f};
  store<T, kDMax>(grad_q + bh * Tq * D, dq, w0, Tq, D, one);
}

// dk and dv for 64 keys: dk_j = sum_i ds_ij q_i, dv_j = sum_i p_ij keep dO_i. The warp's fragments
// are transposed (rows: its 16 keys; columns: the tile's query rows).
template <class T, int kDMax>
__global__ void __launch_bounds__(128)
    grad_kv_kernel(const u16* grad_out, const u16* q, const u16* k, const u16* v, const void* mask, const float* lse,
                   const float* delta, u16* grad_k, u16* grad_v, int64_t Tq, int64_t Tk, int D, int64_t key_blocks,
                   AttentionParams p) {
  const int warp = threadIdx.x / 32;
  u16 *k_sh = tile(0, D), *v_sh = tile(1, D), *q_sh = tile(2, D), *do_sh = tile(3, D);
  float* lse_sh = reinterpret_cast<float*>(tile(4, D));  // [kTile]
  float* delta_sh = lse_sh + kTile;                      // [kTile]
  const int64_t bh = blockIdx.x / key_blocks, j0 = blockIdx.x % key_blocks * kRows, w0 = j0 + 16 * warp;
  stage(k + bh * Tk * D, j0, kRows, Tk, D, k_sh);
  stage(v + bh * Tk * D, j0, kRows, Tk, D, v_sh);
  float dk[kDMax / 8][4], dv[kDMax / 8][4], s[kN][4], dp[kN][4];
  zero<kDMax>(dk);
  zero<kDMax>(dv);
  // Causal: query rows before the block's first key see none of its keys.
  for (int64_t i0 = p.causal ? j0 : 0; i0 < Tq; i0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and k_sh, v_sh written, the first time)
    stage(q + bh * Tq * D, i0, kTile, Tq, D, q_sh);
    stage(grad_out + bh * Tq * D, i0, kTile, Tq, D, do_sh);
    if (threadIdx.x < kTile) {
      const bool in = i0 + threadIdx.x < Tq;
      lse_sh[threadIdx.x] = in ? lse[bh * Tq + i0 + threadIdx.x] : -INFINITY;
      delta_sh[threadIdx.x] = in ? delta[bh * Tq + i0 + threadIdx.x] : 0.f;
    }
    __syncthreads();
    scores<T, kDMax>(s, k_sh, 16 * warp, q_sh, D);    // s^T: [keys, query rows]
    scores<T, kDMax>(dp, v_sh, 16 * warp, do_sh, D);  // (dO v^T)^T
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = frag_col(n, e);
        float pd;
        s[n][e] = score_grad<T>(p, mask, bh, i0 + c, w0 + frag_row(e), Tq, Tk, s[n][e], dp[n][e], lse_sh[c],
                                delta_sh[c], &pd);
        dp[n][e] = pd;
      }
    accumulate<T, kDMax>(dv, dp, do_sh, D);
    accumulate<T, kDMax>(dk, s, q_sh, D);
  }
  const float one[2] = {1.f, 1.f};
  store<T, kDMax>(grad_k + bh * Tk * D, dk, w0, Tk, D, one);
  store<T, kDMax>(grad_v + bh * Tk * D, dv, w0, Tk, D, one);
}

// The shared memory of `tiles` tiles (tile()).
size_t smem_bytes(int tiles, int64_t D) { return size_t(tiles) * kRows * size_t(pitch_of(int(D))) * sizeof(u16); }

}  // namespace mma

enum class Attention { Mma, Simt };
const KernelVariant<Attention> kAttention(DeviceType::CUDA, "attention",
                                          {{Attention::Mma, "mma"}, {Attention::Simt, "simt"}});

// Whether the "mma" variant takes this call: selected, a 16-bit dtype, a head dim it handles, 4-byte
// aligned rows (its 32-bit loads and stores), and its kernels built for sm_80+ (mma.sync): a build
// for older architectures only has PTX that traps there, whatever device runs it.
template <class T>
bool use_mma(const Tensor& q, std::initializer_list<const Tensor*> operands) {
  const int64_t D = q.size(2);
  if (kAttention != Attention::Mma || D % 16 != 0 || D > kMaxHead) return false;
  static const bool built_for_mma = [] {  // asked once per dtype, not on every call
    cudaFuncAttributes a{};
    return cudaFuncGetAttributes(&a, mma::forward_kernel<T, 64>) == cudaSuccess && a.ptxVersion >= 80;
  }();
  if (!built_for_mma) return false;
  for (const Tensor* t : operands)
    if (!aligned(dptr<char>(*t), 4)) return false;
  return true;
}

constexpr int kForwardRows = 4, kGradRows = 2;  // query rows per warp
constexpr int kGradKeys = 4;                    // keys per warp in the dk/dv kernel

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
               const Tensor& lse, const AttentionParams& p) {
  const int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2);
  check_head_dim("attention", D);
  cudaStream_t s = stream_for(out);
  dispatch_floating(q.dtype(), "attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      if (use_mma<T>(q, {&q, &k, &v, &out})) {
        using mma::u16;
        const int64_t blocks = (Tq + mma::kRows - 1) / mma::kRows;
        auto kernel = D <= 64 ? mma::forward_kernel<T, 64> : mma::forward_kernel<T, 128>;
        return launch("attention", kernel, BH * blocks, 128, mma::smem_bytes(3, D), s, dptr<u16>(q), dptr<u16>(k),
                      dptr<u16>(v), mask_data(mask), dptr<u16>(out), dptr<float>(lse), Tq, Tk, int(D), blocks, p);
      }
    }
    const int64_t row_blocks = (Tq + kWarps * kForwardRows - 1) / (kWarps * kForwardRows);
    const size_t smem = sizeof(A) * size_t(kWarps * kForwardRows * D + kTile * padded(int(D)) + kTile * D);
    launch("attention", attention_forward_kernel<T, A, kForwardRows>, BH * row_blocks, 32 * kWarps, smem, s, dptr<T>(q),
           dptr<T>(k), dptr<T>(v), mask_data(mask), dptr<T>(out), dptr<A>(lse), Tq, Tk, int(D), row_blocks, p);
  });
}

void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        const Tensor& out, const Tensor& lse, const Tensor& delta, const Tensor& grad_q,
                        const Tensor& grad_k, const Tensor& grad_v, const AttentionParams& p) {
  const int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2);
  check_head_dim("attention_backward", D);
  cudaStream_t s = stream_for(grad_q);
  dispatch_floating(q.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const T *go = dptr<T>(grad_out), *qp = dptr<T>(q), *kp = dptr<T>(k), *vp = dptr<T>(v);
    const A *lp = dptr<A>(lse), *dp = dptr<A>(delta);
    const void* mp = mask_data(mask);
    launch("attention_backward", attention_delta_kernel<T, A>, grid_for(BH * Tq * 32), 256, 0, s, go, dptr<T>(out),
           dptr<A>(delta), BH * Tq, int(D));
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      if (use_mma<T>(q, {&grad_out, &q, &k, &v, &grad_q, &grad_k, &grad_v})) {
        using mma::u16;
        const u16 *go16 = dptr<u16>(grad_out), *q16 = dptr<u16>(q), *k16 = dptr<u16>(k), *v16 = dptr<u16>(v);
        const int64_t row_blocks = (Tq + mma::kRows - 1) / mma::kRows, key_blocks = (Tk + mma::kRows - 1) / mma::kRows;
        auto grad_q_kernel = D <= 64 ? mma::grad_q_kernel<T, 64> : mma::grad_q_kernel<T, 128>;
        launch("attention_backward", grad_q_kernel, BH * row_blocks, 128, mma::smem_bytes(4, D), s, go16, q16, k16, v16,
               mp, lp, dp, dptr<u16>(grad_q), Tq, Tk, int(D), row_blocks, p);
        auto grad_kv_kernel = D <= 64 ? mma::grad_kv_kernel<T, 64> : mma::grad_kv_kernel<T, 128>;
        launch("attention_backward", grad_kv_kernel, BH * key_blocks, 128,
               mma::smem_bytes(4, D) + 2 * mma::kTile * sizeof(float), s, go16, q16, k16, v16, mp, lp, dp,
               dptr<u16>(grad_k), dptr<u16>(grad_v), Tq, Tk, int(D), key_blocks, p);
        return;
      }
    }
    const int64_t row_blocks = (Tq + kWarps * kGradRows - 1) / (kWarps * kGradRows);
    const size_t smem_q = sizeof(A) * size_t(2 * kWarps * kGradRows * D + 2 * kTile * padded(int(D)));
    launch("attention_backward", attention_grad_q_kernel<T, A, kGradRows>, BH * row_blocks, 32 * kWarps, smem_q, s, go,
           qp, kp, vp, mp, lp, dp, dptr<T>(grad_q), Tq, Tk, int(D), row_blocks, p);
    const int64_t key_blocks = (Tk + kWarps * kGradKeys - 1) / (kWarps * kGradKeys);
    const size_t smem_kv = sizeof(A) * size_t(2 * kTile * padded(int(D)) + 2 * kWarps * kGradKeys * D + 2 * kTile);
    launch("attention_backward", attention_grad_kv_kernel<T, A, kGradKeys>, BH * key_blocks, 32 * kWarps, smem_kv, s,
           go, qp, kp, vp, mp, lp, dp, dptr<T>(grad_k), dptr<T>(grad_v), Tq, Tk, int(D), key_blocks, p);
  });
}

}  // namespace mg::cuda
