// How a BLAS library with column-major matrices (cuBLAS) reads one [B, R, C] operand of a batched
// GEMM from its strides: as stored (a row-major matrix is a column-major C x R one), transposed, or
// not at all, when the kernel first copies it contiguous. Host code: the CUDA matmul uses it, and so
// does its scratch function (built without nvcc), so a plan for cuda books the same copies.
#pragma once
#include <algorithm>
#include <cstdint>

namespace mg::kernels {

struct BlasLayout {
  enum Kind { Rows, Columns, Copy } kind = Copy;
  int64_t ld = 1;  // leading dimension (for Copy: of the contiguous copy)
};

// The layout of a R x C matrix with row stride s1 and column stride s2.
inline BlasLayout blas_layout(int64_t R, int64_t C, int64_t s1, int64_t s2) {
  if ((C == 1 || s2 == 1) && (R == 1 || s1 >= std::max<int64_t>(C, 1)))
    return {BlasLayout::Rows, R == 1 ? std::max<int64_t>(C, 1) : s1};
  if ((R == 1 || s1 == 1) && (C == 1 || s2 >= std::max<int64_t>(R, 1)))
    return {BlasLayout::Columns, C == 1 ? std::max<int64_t>(R, 1) : s2};
  return {BlasLayout::Copy, std::max<int64_t>(C, 1)};
}

}  // namespace mg::kernels
