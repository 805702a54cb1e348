// The CUDA kernels' scratch functions (kernel_list.h's MG_SCRATCH). Host code, built with or without
// nvcc: the kernels call them for the scratch they compute on, and a plan for cuda made on meta calls
// them alone (scratch_backend(cuda)), so both book the same Workspace bytes. cuBLAS's and cuDNN's own
// workspaces are not here: cuBLAS keeps one per handle outside memgrad's allocator, and cuDNN
// convolutions are never chosen on meta (conv2d lowers to im2col + GEMM there, as the cuda backend's
// im2col variant does).
#include <memgrad/kernels/blas_layout.h>
#include <memgrad/kernels/cuda/cuda_kernels.h>

namespace mg::cuda {

// a and b as cuBLAS reads them: in place where either matrix stride is 1, else copied contiguous
// (first a's copy, then b's); integer products run a plain kernel on the strides as they are.
std::vector<Tensor> matmul_scratch(const Tensor& a, const Tensor& b, const Out& out) {
  if (out.numel() == 0 || a.size(2) == 0 || !is_floating(out.dtype())) return {a, b};
  auto readable = [](const Tensor& t, int64_t rows, int64_t cols) {
    return blas_layout(rows, cols, t.stride(1), t.stride(2)).kind == BlasLayout::Copy ? t.contiguous() : t;
  };
  Tensor x = readable(a, out.size(1), a.size(2));
  return {x, readable(b, a.size(2), out.size(2))};
}

// adafactor_update's float64 scratch: one buffer, the largest tensor's, which each tensor's step
// uses in turn (kernels/adafactor.h's scratch_elements).
std::vector<Tensor> adafactor_update_scratch(const TensorLists& lists, const std::vector<adafactor::Scalars>& scalars) {
  int64_t most = 0;
  for (size_t j = 0; j < scalars.size(); ++j)
    if (const int64_t n = lists[0][j].numel())
      most = std::max(most, adafactor::scratch_elements(n, scalars[j].rows, scalars[j].cols));
  if (most == 0) return {Tensor()};
  return {empty_with({most}, kFloat64, lists[0][0].device(), Category::Workspace)};
}

namespace {
// The slices of a norm's `sums` column sums over the rows of x on tall inputs ([slices, sums, n] of
// the statistics' dtype, added in order by the kernel), undefined for one slice.
Tensor norm_partial_sums(const Tensor& x, int64_t sums) {
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / std::max<int64_t>(n, 1);
  const int64_t slices = n == 0 ? 1 : layer_norm_wb_slices(rows, n);
  if (slices == 1) return Tensor();
  return empty_with({slices, sums, n}, x.dtype() == kFloat64 ? kFloat64 : kFloat32, x.device(), Category::Workspace);
}
}  // namespace

// layer_norm_backward's: the weight and bias sums (both, when either is wanted).
std::vector<Tensor> layer_norm_backward_scratch(const Tensor&, const Tensor& x, const Tensor&, const Tensor&,
                                                const Tensor&, const Out&, const Out& grad_weight,
                                                const Out& grad_bias) {
  if (!grad_weight.defined() && !grad_bias.defined()) return {Tensor()};
  return {norm_partial_sums(x, 2)};
}

// rms_norm_backward's: the weight sums alone (RMS norm has no bias).
std::vector<Tensor> rms_norm_backward_scratch(const Tensor&, const Tensor& x, const Tensor&, const Tensor&, const Out&,
                                              const Out& grad_weight) {
  if (!grad_weight.defined()) return {Tensor()};
  return {norm_partial_sums(x, 1)};
}

}  // namespace mg::cuda
