// The scratch the CUDA kernels allocate, for plans made for cuda on meta (scratch_backend(cuda)).
// Host code, built with or without nvcc. cuBLAS's and cuDNN's own workspaces are not here: cuBLAS
// keeps one per handle outside memgrad's allocator, and cuDNN convolutions are never chosen on meta
// (conv2d lowers to im2col + GEMM there, as the cuda backend's im2col variant does).
#include <memgrad/core/ops.h>
#include <memgrad/kernels/backend.h>
#include <memgrad/kernels/blas_layout.h>
#include <memgrad/kernels/cuda/cuda_kernels.h>

namespace mg::kernels {

namespace {
// cuda::matmul copies an operand cuBLAS cannot read in place, first a's, then b's (integer products
// run a plain kernel on the strides as they are).
void matmul_scratch(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0 || a.size(2) == 0 || !is_floating(out.dtype())) return;
  auto copied = [](const Tensor& t, int64_t rows, int64_t cols) {
    return blas_layout(rows, cols, t.stride(1), t.stride(2)).kind == BlasLayout::Copy ? t.contiguous() : Tensor();
  };
  const Tensor x = copied(a, out.size(1), a.size(2)), y = copied(b, a.size(2), out.size(2));
}
// cuda::layer_norm_backward's slices of the weight and bias sums, on tall inputs.
void layer_norm_backward_scratch(const Tensor&, const Tensor& x, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor& grad_weight, const Tensor& grad_bias) {
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / std::max<int64_t>(n, 1);
  if ((!grad_weight.defined() && !grad_bias.defined()) || n == 0) return;
  const Tensor part = cuda::layer_norm_wb_scratch(x, rows, n);  // made and dropped, as the kernel's
}
}  // namespace

const Backend& cuda_scratch() {
  static const Backend b = [] {
    Backend k;
    k.matmul = matmul_scratch;
    k.layer_norm_backward = layer_norm_backward_scratch;
    return k;
  }();
  return b;
}

}  // namespace mg::kernels

namespace mg::cuda {
Tensor layer_norm_wb_scratch(const Tensor& x, int64_t rows, int64_t n) {
  const int64_t slices = layer_norm_wb_slices(rows, n);
  if (slices == 1) return Tensor();
  return empty({slices, 2, n}, TensorOptions(x.dtype() == kFloat64 ? kFloat64 : kFloat32).device(x.device()));
}
}  // namespace mg::cuda
