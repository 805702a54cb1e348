// Reductions and arg reductions on a contiguous [outer, r, inner] view, along r. inner == 1 uses
// a block per row with shuffle reductions; inner > 1 gives each thread a line, strided by `inner`
// so neighbouring threads read neighbouring bytes.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

namespace {

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
  __shared__ A shared[32];
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
  __shared__ A part[8][33];
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
  __shared__ Arg<A> shared[32];
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

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    dispatch(out.dtype(), [&](auto ot) {
      using O = typename decltype(ot)::type;
      if (inner == 1)
        reduce_rows_kernel<<<grid_for(outer, 1), kThreads, 0, s>>>(dptr<T>(x), dptr<O>(out), outer, r, op);
      else
        reduce_cols_kernel<<<grid_for(outer * ((inner + 31) / 32), 1), dim3(32, 8), 0, s>>>(dptr<T>(x), dptr<O>(out),
                                                                                            outer, r, inner, op);
    });
  });
  check_launch("reduce");
}

void arg_reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer, int64_t r,
                int64_t inner) {
  if (indices.numel() == 0) return;
  cudaStream_t s = stream_for(indices);
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    int blocks = inner == 1 ? grid_for(outer, 1) : grid_for(outer * inner);
    arg_reduce_kernel<<<blocks, kThreads, 0, s>>>(dptr<T>(x), dptr_or_null<T>(values), dptr<int64_t>(indices), outer, r,
                                                  inner, op == ReduceOp::Max);
  });
  check_launch("arg_reduce");
}

}  // namespace mg::cuda
