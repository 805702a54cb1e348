// The "mma" variant of fused attention: float16/bfloat16 on tensor cores (attention.cu launches it).
// Device code only, so that tests/cuda can run these very kernels on the host, warp by warp, with
// mma.sync emulated from the PTX ISA's fragment layouts (MG_EMULATE_WARPS).
#pragma once
#include <cstring>

#include <memgrad/kernels/cuda/attention.cuh>

namespace mg::cuda {

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
// Query rows per tile of the dk/dv kernel: at head dim 128 its dk and dv fragments take 128 registers,
// and 32 rows (s and dp in 32 more) keep it within 255 without spilling.
template <int kDMax>
constexpr int kv_tile_rows() {
  return kDMax > 64 ? 32 : kTile;
}
using u16 = uint16_t;

// Row pitch of 16-bit shared tiles: 8 more than D, so the 8 rows a fragment load touches fall in
// distinct banks, and 32-bit pairs stay aligned.
__host__ __device__ __forceinline__ int pitch_of(int D) { return D + 8; }

template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {  // lo in the low half: the lower index
  uint32_t r;
  if constexpr (std::is_same_v<T, BFloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &h, sizeof r);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&r, &h, sizeof r);
  }
  return r;
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
#elif defined(MG_EMULATE_WARPS)  // tests/cuda's host emulation
  emulated_mma_16816(c, a, b0, b1, std::is_same_v<T, BFloat16>);
#else
  __trap();  // the host selects this variant on sm_80+ only
#endif
}

// Tile i of the block's shared memory: kRows rows of pitch_of(D) 16-bit elements each, one after another.
__device__ __forceinline__ u16* tile(int i, int D) {
  MG_DYNAMIC_SHARED(smem_raw);
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

// s[n] = rows [row0, row0 + 16) of tile a times rows [8n, 8n + 8) of tile b, transposed: a 16 x 8N block
// of a b^T over the head dim.
template <class T, int kDMax, int N>
__device__ __forceinline__ void scores(float (&s)[N][4], const u16* a, int row0, const u16* b, int D) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, pitch = pitch_of(D);
#pragma unroll
  for (int n = 0; n < N; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
  for (int d0 = 0; d0 < kDMax; d0 += 16) {
    if (d0 >= D) break;
    const uint32_t af[4] = {ld32(a, pitch, row0 + g, d0 + 2 * t), ld32(a, pitch, row0 + g + 8, d0 + 2 * t),
                            ld32(a, pitch, row0 + g, d0 + 8 + 2 * t), ld32(a, pitch, row0 + g + 8, d0 + 8 + 2 * t)};
#pragma unroll
    for (int n = 0; n < N; ++n)
      mma_16816<T>(s[n], af, ld32(b, pitch, 8 * n + g, d0 + 2 * t), ld32(b, pitch, 8 * n + g, d0 + 8 + 2 * t));
  }
}

// acc (16 x D) += w (16 x 8N, score fragments, rounded to T) times the tile b (8N rows x D).
template <class T, int kDMax, int N>
__device__ __forceinline__ void accumulate(float (&acc)[kDMax / 8][4], const float (&w)[N][4], const u16* b, int D) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, pitch = pitch_of(D);
  auto pair = [&](int row, int col) {
    return uint32_t(b[row * pitch + col]) | uint32_t(b[(row + 1) * pitch + col]) << 16;
  };
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
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

// Fragment element e of column tile n: its row (0..15 within the warp's 16) and column (0..8N-1).
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
__device__ __forceinline__ float masked(const AttentionParams& p, const void* mask, int64_t i, int64_t j, int64_t Tq,
                                        int64_t Tk, float raw) {
  float add;
  return i < Tq && visible<T>(p, mask, i, j, Tk, &add) ? float(p.scale) * raw + add : -INFINITY;
}

template <class T, int kDMax>
__global__ void __launch_bounds__(128)
    forward_kernel(const u16* q, const u16* k, const u16* v, const void* mask, u16* out, float* lse, int64_t Tq,
                   int64_t Tk, int D, int64_t row_blocks, AttentionParams p) {
  const int warp = threadIdx.x / 32;
  u16 *q_sh = tile(0, D), *k_sh = tile(1, D), *v_sh = tile(2, D);
  const int64_t bh = blockIdx.x / row_blocks, i0 = blockIdx.x % row_blocks * kRows, w0 = i0 + 16 * warp;
  mask = head_mask<T>(p, mask, bh);
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
        s[n][e] = masked<T>(p, mask, w0 + frag_row(e), j0 + frag_col(n, e), Tq, Tk, s[n][e]);
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
  const float s = masked<T>(p, mask, i, j, Tq, Tk, raw);
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
  mask = head_mask<T>(p, mask, bh);
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
  float* lse_sh = reinterpret_cast<float*>(tile(4, D));  // [kTile] (kQ used)
  float* delta_sh = lse_sh + kTile;                      // [kTile]
  const int64_t bh = blockIdx.x / key_blocks, j0 = blockIdx.x % key_blocks * kRows, w0 = j0 + 16 * warp;
  mask = head_mask<T>(p, mask, bh);
  stage(k + bh * Tk * D, j0, kRows, Tk, D, k_sh);
  stage(v + bh * Tk * D, j0, kRows, Tk, D, v_sh);
  constexpr int kQ = kv_tile_rows<kDMax>();
  float dk[kDMax / 8][4], dv[kDMax / 8][4], s[kQ / 8][4], dp[kQ / 8][4];
  zero<kDMax>(dk);
  zero<kDMax>(dv);
  // Causal: query rows before the block's first key see none of its keys.
  for (int64_t i0 = p.causal ? j0 : 0; i0 < Tq; i0 += kQ) {
    __syncthreads();  // the previous tile is consumed (and k_sh, v_sh written, the first time)
    stage(q + bh * Tq * D, i0, kQ, Tq, D, q_sh);
    stage(grad_out + bh * Tq * D, i0, kQ, Tq, D, do_sh);
    if (threadIdx.x < kQ) {
      const bool in = i0 + threadIdx.x < Tq;
      lse_sh[threadIdx.x] = in ? lse[bh * Tq + i0 + threadIdx.x] : -INFINITY;
      delta_sh[threadIdx.x] = in ? delta[bh * Tq + i0 + threadIdx.x] : 0.f;
    }
    __syncthreads();
    scores<T, kDMax>(s, k_sh, 16 * warp, q_sh, D);    // s^T: [keys, query rows]
    scores<T, kDMax>(dp, v_sh, 16 * warp, do_sh, D);  // (dO v^T)^T
#pragma unroll
    for (int n = 0; n < kQ / 8; ++n)
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
inline size_t smem_bytes(int tiles, int64_t D) {
  return size_t(tiles) * kRows * size_t(pitch_of(int(D))) * sizeof(u16);
}

}  // namespace mma

}  // namespace mg::cuda
