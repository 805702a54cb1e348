// The scratch the CUDA kernels allocate, for plans made for cuda on meta (scratch_backend(cuda)).
// Host code, built with or without nvcc. cuBLAS's and cuDNN's own workspaces are not here: cuBLAS
// keeps one per handle outside memgrad's allocator, and cuDNN convolutions are never chosen on meta
// (conv2d lowers to im2col + GEMM there, as the cuda backend's im2col variant does).
#include <memgrad/core/ops.h>
#include <memgrad/kernels/backend.h>
#include <memgrad/kernels/blas_layout.h>

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
// cuda::adafactor_update's float64 scratch, one tensor's at a time.
void adafactor_scratch(const TensorLists& lists, const std::vector<adafactor::Scalars>& scalars) {
  for (size_t j = 0; j < scalars.size(); ++j) {
    const Tensor& p = lists[0][j];
    if (p.numel() == 0) continue;
    const Tensor scratch = empty({adafactor::scratch_elements(p.numel(), scalars[j].rows, scalars[j].cols)},
                                 TensorOptions(kFloat64).device(p.device()));
  }
}
}  // namespace

const Backend& cuda_scratch() {
  static const Backend b = [] {
    Backend k;
    k.matmul = matmul_scratch;
    k.adafactor_update = adafactor_scratch;
    return k;
  }();
  return b;
}

}  // namespace mg::kernels
