// The "simt" variant of fused attention (attention.cu launches it; tests/cuda runs it on the host):
// flash-attention style on CUDA cores. Tiles of 32 keys and values are staged in shared memory; a
// warp takes a query row, its lanes one key each, and keeps the row's running max, sum and output in
// registers. Backward recomputes the probabilities from lse in two kernels without atomics: one per
// query block for dq, one per key block for dk and dv (there the lanes take query rows). Head dims
// up to 128; arithmetic in float (double for float64).
#pragma once
#include <memgrad/kernels/cuda/attention.cuh>

namespace mg::cuda::simt {

constexpr int kTile = 32;                       // keys per shared-memory tile: one per lane
constexpr int kMaxHead = 128;                   // head dim limit: 4 elements per lane
constexpr int kPerLane = kMaxHead / kTile;      // output elements a lane owns (d = lane + 32 e)
constexpr int kWarps = 4;                       // warps per block in the query-row kernels
constexpr int kForwardRows = 4, kGradRows = 2;  // query rows per warp
constexpr int kGradKeys = 4;                    // keys per warp in the dk/dv kernel

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
__host__ __device__ constexpr int padded(int D) { return D | 1; }

// Dynamic shared memory of each kernel for head dim D, with A the arithmetic type.
template <class A>
__host__ __device__ constexpr size_t forward_smem(int D) {
  return sizeof(A) * size_t(kWarps * kForwardRows * D + kTile * padded(D) + kTile * D);
}
template <class A>
__host__ __device__ constexpr size_t grad_q_smem(int D) {
  return sizeof(A) * size_t(2 * kWarps * kGradRows * D + 2 * kTile * padded(D));
}
template <class A>
__host__ __device__ constexpr size_t grad_kv_smem(int D) {
  return sizeof(A) * size_t(2 * kTile * padded(D) + 2 * kWarps * kGradKeys * D + 2 * kTile);
}

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

// One block: kWarps * R query rows of head bh against every visible key tile.
template <class T, class A, int R>
__global__ void attention_forward_kernel(const T* q, const T* k, const T* v, const void* mask, T* out, A* lse,
                                         int64_t Tq, int64_t Tk, int D, int64_t row_blocks, AttentionParams p) {
  MG_DYNAMIC_SHARED(smem_raw);
  A* q_sh = reinterpret_cast<A*>(smem_raw);  // [kWarps * R][D]
  A* k_sh = q_sh + kWarps * R * D;           // [kTile][padded(D)]: lanes read rows
  A* v_sh = k_sh + kTile * padded(D);        // [kTile][D]: lanes read columns
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, rows = kWarps * R;
  const int64_t bh = blockIdx.x / row_blocks, i0 = blockIdx.x % row_blocks * rows;
  mask = head_mask<T>(p, mask, bh);
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
      const bool valid = visible<T>(p, mask, i, j, Tk, &add);
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
  // lse first: rows past Tq (the dk/dv kernel's last tile of query rows) have lse -inf and no mask row.
  if (lse_i == neg_inf<A>() || !visible<T>(p, mask, i, j, Tk, &add)) return A(0);
  const A prob = exp(A(p.scale) * dot(q_row, k_row, D) + add - lse_i), keep = keep_scale<A>(p, bh, i, j, Tq, Tk);
  *p_dropped = prob * keep;
  return prob * (dot(do_row, v_row, D) * keep - delta_i) * A(p.scale);
}

// dq for kWarps * R query rows of head bh: dq_i = sum_j ds_ij k_j.
template <class T, class A, int R>
__global__ void attention_grad_q_kernel(const T* grad_out, const T* q, const T* k, const T* v, const void* mask,
                                        const A* lse, const A* delta, T* grad_q, int64_t Tq, int64_t Tk, int D,
                                        int64_t row_blocks, AttentionParams p) {
  MG_DYNAMIC_SHARED(smem_raw);
  const int rows = kWarps * R;
  A* q_sh = reinterpret_cast<A*>(smem_raw);  // [rows][D]
  A* do_sh = q_sh + rows * D;                // [rows][D]
  A* k_sh = do_sh + rows * D;                // [kTile][padded(D)]
  A* v_sh = k_sh + kTile * padded(D);        // [kTile][padded(D)]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t bh = blockIdx.x / row_blocks, i0 = blockIdx.x % row_blocks * rows;
  mask = head_mask<T>(p, mask, bh);
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
  MG_DYNAMIC_SHARED(smem_raw);
  const int pitch = padded(D), keys = kWarps * R;
  A* q_sh = reinterpret_cast<A*>(smem_raw);  // [kTile][pitch]: lanes read rows, and columns
  A* do_sh = q_sh + kTile * pitch;           // [kTile][pitch]
  A* k_sh = do_sh + kTile * pitch;           // [keys][D]: every lane reads the same row
  A* v_sh = k_sh + keys * D;                 // [keys][D]
  A* lse_sh = v_sh + keys * D;               // [kTile]
  A* delta_sh = lse_sh + kTile;              // [kTile]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t bh = blockIdx.x / key_blocks, j0 = blockIdx.x % key_blocks * keys;
  mask = head_mask<T>(p, mask, bh);
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

}  // namespace mg::cuda::simt
