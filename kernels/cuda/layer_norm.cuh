// The layer norm kernels (RMS norm's too: kCenter false) over the rows of a contiguous [rows, n] view,
// in a header of their own so that tests/cuda can run them on the host, emulated, against the CPU
// kernels: a block per row, or a warp per row (kWarpRow), with shuffle reductions; the backward's
// weight and bias sums run by columns, in row slices on tall inputs.
#pragma once
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda::layer_norm_kernels {

// ---- layer norm. kWarpRow: a warp per row (8 rows per block), else a block per row.
template <bool kWarpRow, class A, class Op>
__device__ __forceinline__ A row_reduce(A v, Op op, A* shared) {
  if constexpr (kWarpRow)
    return warp_reduce(v, op);
  else
    return block_reduce(v, op, shared);
}

template <bool kWarpRow, class T, bool kCenter = true>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, opmath_t<T>* mean, opmath_t<T>* rstd,
                                  int64_t rows, int64_t n, double eps) {
  using A = opmath_t<T>;
  MG_SHARED(shared, A[32]);
  const int lanes = kWarpRow ? 32 : blockDim.x, lane = kWarpRow ? threadIdx.x % 32 : threadIdx.x;
  const int64_t per_block = kWarpRow ? blockDim.x / 32 : 1;
  for (int64_t base = blockIdx.x * per_block; base < rows; base += int64_t(gridDim.x) * per_block) {
    int64_t i = base + (kWarpRow ? threadIdx.x / 32 : 0);
    if (i >= rows) continue;  // whole warps only (kWarpRow), so shuffles stay converged
    const T* row = x + i * n;
    A mu = 0;
    if constexpr (kCenter) {
      A s = 0;
      for (int64_t j = lane; j < n; j += lanes) s += dload(row[j]);
      mu = row_reduce<kWarpRow>(s, SumOp{}, shared) / A(n);
    }
    A ss = 0;
    for (int64_t j = lane; j < n; j += lanes) {
      A d = dload(row[j]) - mu;
      ss += d * d;
    }
    A rs = A(1) / sqrt(row_reduce<kWarpRow>(ss, SumOp{}, shared) / A(n) + A(eps));
    if (lane == 0) {
      if constexpr (kCenter) mean[i] = mu;
      rstd[i] = rs;
    }
    for (int64_t j = lane; j < n; j += lanes) {
      A v = (A(dload(row[j])) - mu) * rs;
      if (w) v *= dload(w[j]);
      if (b) v += dload(b[j]);
      y[i * n + j] = dstore<T>(v);
    }
  }
}

template <class A>
struct Pair {
  A a, b;
};
template <class A>
__device__ __forceinline__ Pair<A> shfl_xor(Pair<A> p, int o) {
  return {__shfl_xor_sync(0xffffffffu, p.a, o), __shfl_xor_sync(0xffffffffu, p.b, o)};
}
struct SumPair {
  template <class A>
  __device__ __forceinline__ Pair<A> operator()(Pair<A> x, Pair<A> y) const {
    return {x.a + y.a, x.b + y.b};
  }
};

template <class T, bool kCenter = true>
__global__ void layer_norm_grad_x_kernel(const T* g, const T* x, const opmath_t<T>* mean, const opmath_t<T>* rstd,
                                         const T* w, T* gx, int64_t rows, int64_t n) {
  using A = opmath_t<T>;
  MG_SHARED(shared, Pair<A>[32]);
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const T *row = x + i * n, *grow = g + i * n;
    A mu = kCenter ? A(mean[i]) : A(0), rs = rstd[i];
    Pair<A> acc{0, 0};
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      A gv = A(dload(grow[j])) * (w ? A(dload(w[j])) : A(1));
      acc.a += gv;
      acc.b += gv * (A(dload(row[j])) - mu) * rs;
    }
    acc = block_reduce(acc, SumPair{}, shared);
    A mean_g = kCenter ? acc.a / A(n) : A(0), mean_gx = acc.b / A(n);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      A gv = A(dload(grow[j])) * (w ? A(dload(w[j])) : A(1));
      A xh = (A(dload(row[j])) - mu) * rs;
      gx[i * n + j] = dstore<T>(rs * (gv - mean_g - xh * mean_gx));
    }
  }
}

// Column sums over rows, blocks of 32 x 8 like reduce_cols_kernel. Tall inputs split their rows in
// gridDim.y slices (so that the blocks outnumber a GPU's SMs): slice y writes its sums of column j to
// part[y][0][j] (weight) and part[y][1][j] (bias), which layer_norm_wb_sum_kernel adds in order. RMS
// norm (!kCenter) has no mean and no bias: its part is [slices, 1, n].
template <class T, bool kCenter = true>
__global__ void layer_norm_grad_wb_kernel(const T* g, const T* x, const opmath_t<T>* mean, const opmath_t<T>* rstd,
                                          T* gw, T* gb, opmath_t<T>* part, int64_t rows, int64_t n) {
  constexpr int kSums = kCenter ? 2 : 1;
  using A = opmath_t<T>;
  MG_SHARED(part_sh, Pair<A>[8][33]);
  const int64_t per_slice = (rows + gridDim.y - 1) / gridDim.y, r0 = blockIdx.y * per_slice,
                r1 = min(rows, r0 + per_slice);
  for (int64_t b = blockIdx.x; b < (n + 31) / 32; b += gridDim.x) {
    int64_t j = b * 32 + threadIdx.x;
    Pair<A> acc{0, 0};
    if (j < n)
      for (int64_t i = r0 + threadIdx.y; i < r1; i += blockDim.y) {
        A gv = dload(g[i * n + j]);
        acc.a += gv * (A(dload(x[i * n + j])) - (kCenter ? A(mean[i]) : A(0))) * A(rstd[i]);
        acc.b += gv;
      }
    __syncthreads();
    part_sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
      for (int y = 1; y < int(blockDim.y); ++y) acc = SumPair{}(acc, part_sh[y][threadIdx.x]);
      if (part) {
        part[(kSums * blockIdx.y) * n + j] = acc.a;
        if constexpr (kCenter) part[(kSums * blockIdx.y + 1) * n + j] = acc.b;
      } else {
        if (gw) gw[j] = dstore<T>(acc.a);
        if (gb) gb[j] = dstore<T>(acc.b);
      }
    }
  }
}

template <class T, bool kCenter = true>
__global__ void layer_norm_wb_sum_kernel(const opmath_t<T>* part, T* gw, T* gb, int64_t slices, int64_t n) {
  using A = opmath_t<T>;
  constexpr int kSums = kCenter ? 2 : 1;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    A w = 0, b = 0;
    for (int64_t y = 0; y < slices; ++y) {
      w += part[(kSums * y) * n + j];
      if constexpr (kCenter) b += part[(kSums * y + 1) * n + j];
    }
    if (gw) gw[j] = dstore<T>(w);
    if (gb) gb[j] = dstore<T>(b);
  }
}

}  // namespace mg::cuda::layer_norm_kernels
