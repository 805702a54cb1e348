// Softmax and log-softmax along r of a contiguous [outer, r, inner] view, their backward, and the
// scaled, masked softmax of attention scores; the kernels are softmax.cuh's.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/softmax.cuh>

namespace mg::cuda {

using namespace softmax_kernels;

void softmax(const Tensor& x, const Out& out, int64_t outer, int64_t r, int64_t inner, bool log) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch_floating(x.dtype(), "softmax", [&](auto xt) {
    using T = typename decltype(xt)::type;
    int blocks = inner == 1 ? grid_for(outer, 1) : grid_for(outer * inner);
    softmax_kernel<<<blocks, kThreads, 0, s>>>(dptr<T>(x), dptr<T>(out), outer, r, inner, log);
  });
  check_launch("softmax");
}

void softmax_backward(const Tensor& grad, const Tensor& out, const Out& grad_in, int64_t outer, int64_t r,
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

void scaled_masked_softmax(const Tensor& x, const Tensor& mask, const Out& out, double scale, bool causal,
                           const AttentionMask& m) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  const int64_t BH = x.size(0), Tq = x.size(1), Tk = x.size(2);
  dispatch_floating(x.dtype(), "scaled_masked_softmax", [&](auto xt) {
    using T = typename decltype(xt)::type;
    scaled_masked_softmax_kernel<<<grid_for(BH * Tq, 1), kThreads, 0, s>>>(dptr<T>(x), dptr_or_null<const char>(mask),
                                                                           dptr<T>(out), BH, Tq, Tk, scale, causal, m);
  });
  check_launch("scaled_masked_softmax");
}

}  // namespace mg::cuda
