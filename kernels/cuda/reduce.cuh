// Reduction kernels on a contiguous [outer, r, inner] view, along r (reduce.cu launches them;
// tests/cuda runs them on the host): sum/max/min, log-sum-exp, arg max/min, scans and the cumulative
// product's gradient. inner == 1 uses a block per row with shuffle reductions; inner > 1 gives each
// thread a line, strided by `inner` so neighbouring threads read neighbouring bytes.
#pragma once
#include <memgrad/kernels/backend.h>
#include <memgrad/kernels/scan.h>
#include <memgrad/kernels/cuda/device_common.cuh>
#include <memgrad/kernels/cuda/online_softmax.cuh>

namespace mg::cuda::reduce_kernels {

// Accumulator: float for float32 and the 16-bit types, double for float64, int64 otherwise.
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, int64_t>;

template <class A>
__device__ __forceinline__ bool is_nan(A v) {
  return v != v;
}

struct Combine {
  ReduceOp op;
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    if (op == ReduceOp::Sum) return a + b;
    if (is_nan(a)) return a;  // NaN propagates
    if (is_nan(b)) return b;
    return op == ReduceOp::Max ? (a > b ? a : b) : (a < b ? a : b);
  }
};

template <class T, class O>
__global__ void reduce_rows_kernel(const T* x, O* out, int64_t rows, int64_t r, ReduceOp op) {
  using A = acc_t<T>;
  MG_SHARED(shared, A[32]);
  Combine c{op};
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = x + row * r;
    A acc = op == ReduceOp::Sum ? A(0) : A(dload(p[0]));
    for (int64_t k = threadIdx.x; k < r; k += blockDim.x) acc = c(acc, A(dload(p[k])));
    acc = block_reduce(acc, c, shared);
    if (threadIdx.x == 0) out[row] = dstore<O>(acc);
  }
}

// Blocks of 32 x 8 threads: x runs along inner (coalesced), y splits r; partial results meet in
// shared memory.
template <class T, class O>
__global__ void reduce_cols_kernel(const T* x, O* out, int64_t outer, int64_t r, int64_t inner, ReduceOp op) {
  using A = acc_t<T>;
  MG_SHARED(part, A[8][33]);
  Combine c{op};
  const int64_t col_blocks = (inner + 31) / 32;
  for (int64_t b = blockIdx.x; b < outer * col_blocks; b += gridDim.x) {
    int64_t o = b / col_blocks, i = (b % col_blocks) * 32 + threadIdx.x;
    A acc = A(0);
    if (i < inner) {
      const T* p = x + o * r * inner + i;
      acc = op == ReduceOp::Sum ? A(0) : A(dload(p[0]));
      for (int64_t k = threadIdx.y; k < r; k += blockDim.y) acc = c(acc, A(dload(p[k * inner])));
    }
    __syncthreads();
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      for (int y = 1; y < int(blockDim.y); ++y) acc = c(acc, part[y][threadIdx.x]);
      out[o * inner + i] = dstore<O>(acc);
    }
  }
}

// ---- log-sum-exp: running (max, sum of exp(x - max)) and whether a NaN was seen
template <class A>
struct Lse {
  A m, s, nan;
};
template <class A>
__device__ __forceinline__ Lse<A> shfl_xor(Lse<A> a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o),
          __shfl_xor_sync(0xffffffffu, a.nan, o)};
}
struct MergeLse {
  template <class A>
  __device__ __forceinline__ Lse<A> operator()(Lse<A> a, Lse<A> b) const {
    MaxSum<A> ms = MergeMaxSum{}(MaxSum<A>{a.m, a.s}, MaxSum<A>{b.m, b.s});
    return {ms.m, ms.s, a.nan + b.nan};
  }
};
template <class A>
__device__ __forceinline__ void push(Lse<A>& acc, A v) {
  if (v != v) {
    acc.nan = 1;
    return;
  }
  MaxSum<A> ms{acc.m, acc.s};
  push(ms, v);
  acc.m = ms.m, acc.s = ms.s;
}
// The result as the CPU gives it: NaN if any, the max when it is infinite, else max + log(sum).
template <class O, class A>
__device__ __forceinline__ O lse_value(const Lse<A>& a) {
  if (a.nan > A(0)) return dstore<O>(A(NAN));
  return dstore<O>(isinf(a.m) ? a.m : a.m + log(a.s));
}

// inner == 1: a block per row.
template <class T, class O>
__global__ void logsumexp_rows_kernel(const T* x, O* out, int64_t rows, int64_t r) {
  using A = opmath_t<T>;
  MG_SHARED(shared, Lse<A>[32]);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    Lse<A> acc{A(-INFINITY), A(0), A(0)};
    for (int64_t k = threadIdx.x; k < r; k += blockDim.x) push(acc, A(dload(x[row * r + k])));
    acc = block_reduce(acc, MergeLse{}, shared);
    if (threadIdx.x == 0) out[row] = lse_value<O>(acc);
  }
}

// inner > 1: a thread per line; neighbouring threads read neighbouring columns.
template <class T, class O>
__global__ void logsumexp_cols_kernel(const T* x, O* out, int64_t outer, int64_t r, int64_t inner) {
  using A = opmath_t<T>;
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < outer * inner;
       l += int64_t(gridDim.x) * blockDim.x) {
    const T* p = x + (l / inner) * r * inner + l % inner;
    Lse<A> acc{A(-INFINITY), A(0), A(0)};
    for (int64_t k = 0; k < r; ++k) push(acc, A(dload(p[k * inner])));
    out[l] = lse_value<O>(acc);
  }
}

// ---- scans and the cumulative product's gradient: a thread per line, in order (as the CPU)
template <class T, class O>
__global__ void scan_kernel(const T* x, O* out, int64_t outer, int64_t r, int64_t inner, bool sum) {
  using A = acc_t<T>;
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < outer * inner;
       l += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (l / inner) * r * inner + l % inner;
    A acc = sum ? A(0) : A(1);
    for (int64_t k = 0; k < r; ++k) {
      const A v = A(dload(x[base + k * inner]));
      acc = sum ? acc + v : acc * v;
      out[base + k * inner] = dstore<O>(acc);
    }
  }
}

template <class T>
__global__ void cumprod_backward_kernel(const T* g, const T* x, const T* y, T* gi, int64_t outer, int64_t r,
                                        int64_t inner) {
  using A = opmath_t<T>;
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < outer * inner;
       l += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (l / inner) * r * inner + l % inner;
    cumprod_grad_line(
        r, [&](int64_t k) { return A(dload(x[base + k * inner])); },
        [&](int64_t k) { return A(dload(y[base + k * inner])); },
        [&](int64_t k) { return A(dload(g[base + k * inner])); },
        [&](int64_t k, A v) { gi[base + k * inner] = dstore<T>(v); });
  }
}

// (value, index) with the CPU's preference: NaN first, then the extreme, then the lower index.
template <class A>
struct Arg {
  A v;
  int64_t i;
};
template <class A>
__device__ __forceinline__ Arg<A> shfl_xor(Arg<A> a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.v, o), __shfl_xor_sync(0xffffffffu, a.i, o)};
}
struct ArgBetter {
  bool is_max;
  template <class A>
  __device__ __forceinline__ Arg<A> operator()(Arg<A> a, Arg<A> b) const {
    bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) return an && bn ? (a.i < b.i ? a : b) : (an ? a : b);
    if (a.v == b.v) return a.i < b.i ? a : b;
    return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
  }
};

template <class T>
__global__ void arg_reduce_kernel(const T* x, T* values, int64_t* indices, int64_t outer, int64_t r, int64_t inner,
                                  bool is_max) {
  using A = acc_t<T>;
  MG_SHARED(shared, Arg<A>[32]);
  ArgBetter better{is_max};
  if (inner == 1) {  // a block per row
    for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
      const T* p = x + row * r;
      Arg<A> best{A(dload(p[0])), 0};
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) best = better(best, Arg<A>{A(dload(p[k])), k});
      best = block_reduce(best, better, shared);
      if (threadIdx.x == 0) {
        if (values) values[row] = p[best.i];
        indices[row] = best.i;
      }
    }
    return;
  }
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < outer * inner;
       l += int64_t(gridDim.x) * blockDim.x) {
    const T* p = x + (l / inner) * r * inner + l % inner;
    Arg<A> best{A(dload(p[0])), 0};
    for (int64_t k = 1; k < r; ++k) best = better(best, Arg<A>{A(dload(p[k * inner])), k});
    if (values) values[l] = p[best.i * inner];
    indices[l] = best.i;
  }
}

}  // namespace mg::cuda::reduce_kernels
