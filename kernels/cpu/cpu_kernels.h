// The CPU backend's kernels, one family per file; backend.cpp gathers them into the table. The
// CPU has no optional (library) kernels: conv2d lowers to im2col + GEMM.
#pragma once
#include <memgrad/kernels/backend.h>

namespace mg::cpu {
using namespace mg::kernels;
#define MG_KERNEL(name, ret, ...) ret name(__VA_ARGS__);
#define MG_OPTIONAL_KERNEL(name, ret, ...)
#define MG_SCRATCH(name) ScratchOf<decltype(name)> name##_scratch;
#include <memgrad/kernels/kernel_list.h>

// C = alpha op(A) op(B) + beta C for kernels that split their own work over threads (matmul,
// fused attention): row-major m x k / k x n operands (op transposes a stored k x m / n x k one)
// with leading dimensions lda, ldb, ldc, on OpenBLAS or Eigen as matmul's kernel variant picks.
// Single-threaded when called inside a parallel region (both libraries thread outside one).
template <class A>
void gemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, A alpha, const A* a, int64_t lda,
                 const A* b, int64_t ldb, A beta, A* c, int64_t ldc);
}  // namespace mg::cpu
