// The CPU backend's kernels, one family per file; backend.cpp gathers them into the table. The
// CPU has no optional (library) kernels: conv2d lowers to im2col + GEMM.
#pragma once
#include <memgrad/kernels/backend.h>

namespace mg::cpu {
using namespace mg::kernels;
#define MG_KERNEL(name, ret, ...) ret name(__VA_ARGS__);
#define MG_OPTIONAL_KERNEL(name, ret, ...)
#include <memgrad/kernels/kernel_list.h>
// The scratch of the kernels that allocate some, made without computing (scratch_backend(cpu)).
void matmul_scratch(const Tensor& a, const Tensor& b, const Tensor& out);
}  // namespace mg::cpu
