// Softmax and log-softmax along r of a contiguous [outer, r, inner] view, in one pass with an
// online max (online_softmax.cuh), and their backward.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/online_softmax.cuh>

namespace mg::cuda {

namespace {

template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t outer, int64_t r, int64_t inner, bool log) {
  using A = opmath_t<T>;
  __shared__ MaxSum<A> shared[32];
  if (inner == 1) {
    for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
      const T* p = x + row * r;
      MaxSum<A> ms{-INFINITY, A(0)};
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) push(ms, dload(p[k]));
      ms = block_reduce(ms, MergeMaxSum{}, shared);
      A log_sum = ::log(ms.s), inv = A(1) / ms.s;  // (x - max) - log_sum, as on the cpu
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) {
        A v = dload(p[k]);
        y[row * r + k] = dstore<T>(log ? (v - ms.m) - log_sum : exp(v - ms.m) * inv);
      }
    }
    return;
  }
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < outer * inner;
       l += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (l / inner) * r * inner + l % inner;
    MaxSum<A> ms{-INFINITY, A(0)};
    for (int64_t k = 0; k < r; ++k) push(ms, A(dload(x[base + k * inner])));
    A log_sum = ::log(ms.s), inv = A(1) / ms.s;  // (x - max) - log_sum, as on the cpu
    for (int64_t k = 0; k < r; ++k) {
      A v = dload(x[base + k * inner]);
      y[base + k * inner] = dstore<T>(log ? (v - ms.m) - log_sum : exp(v - ms.m) * inv);
    }
  }
}

template <class T>
__global__ void softmax_backward_kernel(const T* g, const T* y, T* gi, int64_t outer, int64_t r, int64_t inner,
                                        bool log) {
  using A = opmath_t<T>;
  __shared__ A shared[32];
  auto term = [log](A gv, A yv) { return log ? gv : gv * yv; };  // log_softmax: sum(g); softmax: sum(g * y)
  auto out = [log](A gv, A yv, A dot) { return log ? gv - exp(yv) * dot : yv * (gv - dot); };
  if (inner == 1) {
    for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
      const int64_t base = row * r;
      A dot = 0;
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) dot += term(dload(g[base + k]), dload(y[base + k]));
      dot = block_reduce(dot, SumOp{}, shared);
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x)
        gi[base + k] = dstore<T>(out(dload(g[base + k]), dload(y[base + k]), dot));
    }
    return;
  }
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < outer * inner;
       l += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (l / inner) * r * inner + l % inner;
    A dot = 0;
    for (int64_t k = 0; k < r; ++k) dot += term(dload(g[base + k * inner]), dload(y[base + k * inner]));
    for (int64_t k = 0; k < r; ++k) {
      int64_t j = base + k * inner;
      gi[j] = dstore<T>(out(dload(g[j]), dload(y[j]), dot));
    }
  }
}

}  // namespace

void softmax(const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner, bool log) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch_floating(x.dtype(), "softmax", [&](auto xt) {
    using T = typename decltype(xt)::type;
    int blocks = inner == 1 ? grid_for(outer, 1) : grid_for(outer * inner);
    softmax_kernel<<<blocks, kThreads, 0, s>>>(dptr<T>(x), dptr<T>(out), outer, r, inner, log);
  });
  check_launch("softmax");
}

void softmax_backward(const Tensor& grad, const Tensor& out, const Tensor& grad_in, int64_t outer, int64_t r,
                      int64_t inner, bool log) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch_floating(out.dtype(), "softmax_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    int blocks = inner == 1 ? grid_for(outer, 1) : grid_for(outer * inner);
    softmax_backward_kernel<<<blocks, kThreads, 0, s>>>(dptr<T>(grad), dptr<T>(out), dptr<T>(grad_in), outer, r, inner,
                                                        log);
  });
  check_launch("softmax_backward");
}

}  // namespace mg::cuda
