// Convolution lowering (im2col / col2im) and 2-d pooling on contiguous NCHW tensors; the kernels
// are conv.cuh's.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/conv.cuh>

namespace mg::cuda {

using namespace conv_kernels;

void im2col(const Tensor& x, const Out& col, const Conv2dGeometry& g) {
  if (col.numel() == 0) return;
  cudaStream_t s = stream_for(col);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    im2col_kernel<<<grid_for(col.numel()), 256, 0, s>>>(dptr<T>(x), dptr<T>(col), g);
  });
  check_launch("im2col");
}

void col2im(const Tensor& col, const Out& x, const Conv2dGeometry& g) {
  if (x.numel() == 0) return;
  cudaStream_t s = stream_for(x);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    col2im_kernel<<<grid_for(x.numel()), 256, 0, s>>>(dptr<T>(col), dptr<T>(x), g);
  });
  check_launch("col2im");
}

void max_pool2d(const Tensor& x, const Out& out, const Out& indices, const Conv2dGeometry& g) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_kernel<<<grid_for(out.numel()), 256, 0, s>>>(dptr<T>(x), dptr<T>(out), dptr<int64_t>(indices), g);
  });
  check_launch("max_pool2d");
}

void max_pool2d_backward(const Tensor& grad, const Tensor& indices, const Out& grad_x) {
  if (grad.numel() == 0) return;
  cudaStream_t s = stream_for(grad_x);
  const int64_t L = grad.size(2) * grad.size(3), plane = grad_x.size(2) * grad_x.size(3);
  dispatch(grad.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_backward_kernel<<<grid_for(grad.numel()), 256, 0, s>>>(dptr<T>(grad), dptr<int64_t>(indices),
                                                                    dptr<T>(grad_x), L, plane, grad.numel());
  });
  check_launch("max_pool2d_backward");
}

void avg_pool2d(const Tensor& x, const Out& out, const Conv2dGeometry& g) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool_kernel<T, false><<<grid_for(out.numel()), 256, 0, s>>>(dptr<T>(x), dptr<T>(out), g);
  });
  check_launch("avg_pool2d");
}

void avg_pool2d_backward(const Tensor& grad, const Out& grad_x, const Conv2dGeometry& g) {
  if (grad.numel() == 0) return;
  cudaStream_t s = stream_for(grad_x);
  dispatch_floating(grad.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool_kernel<T, true><<<grid_for(grad.numel()), 256, 0, s>>>(dptr<T>(grad), dptr<T>(grad_x), g);
  });
  check_launch("avg_pool2d_backward");
}

}  // namespace mg::cuda
