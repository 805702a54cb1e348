// Cross-entropy fused with its softmax, forward and backward; the kernels are loss.cuh's.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/loss.cuh>

namespace mg::cuda {

using namespace loss_kernels;

void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, const Out& loss,
                   int64_t ignore_index, double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  check_indices("cross_entropy", target, C, ignore_index);
  if (N == 0) return;
  cudaStream_t s = stream_for(loss);
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto xt) {
    using T = typename decltype(xt)::type;
    dispatch_floating(loss.dtype(), "cross_entropy", [&](auto lt) {
      using L = typename decltype(lt)::type;
      cross_entropy_kernel<<<grid_for(N, 1), kThreads, 0, s>>>(dptr<T>(logits), dptr<int64_t>(target),
                                                               dptr_or_null<T>(weight), dptr<L>(loss), N, C,
                                                               ignore_index, smoothing);
    });
  });
  check_launch("cross_entropy");
}

void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target, const Tensor& weight,
                            const Out& grad_logits, int64_t ignore_index, double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  cudaStream_t s = stream_for(grad_logits);
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    dispatch_floating(grad_loss.dtype(), "cross_entropy_backward", [&](auto lt) {
      using L = typename decltype(lt)::type;
      cross_entropy_backward_kernel<<<grid_for(N, 1), kThreads, 0, s>>>(
          dptr<L>(grad_loss), dptr<T>(logits), dptr<int64_t>(target), dptr_or_null<T>(weight), dptr<T>(grad_logits), N,
          C, ignore_index, smoothing);
    });
  });
  check_launch("cross_entropy_backward");
}

}  // namespace mg::cuda
