// One thread's GEMM for the CPU kernels (gemm_serial), the libraries it runs on (matmul's kernel
// variants), which of them runs below this CPU, and the one "auto" picks. Private to kernels/cpu;
// compiled once, not per ISA level (kernels/cpu/cpu_kernels.h): the libraries dispatch on the CPU
// themselves, and Eigen serves what they cannot take.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <memgrad/core/cpu_isa.h>
#include <memgrad/core/dtype.h>

namespace mg::cpu {

// matmul's variants, in the order "auto" prefers the libraries where they run at the same level:
// oneDNN (float32 only: it has no float64 GEMM) led every step shape measured, OpenBLAS next.
enum class Gemm { Auto, OneDNN, OpenBLAS, Eigen };

struct GemmLibrary {
  Gemm library;
  const char* name;    // the variant's name: "onednn", "openblas", "eigen"
  CpuIsa level;        // the vector ISA level of the code it runs here, as the library reports it
  std::string detail;  // what it runs: version and code path
};
// The libraries this build links, read once: oneDNN's effective ISA, OpenBLAS's core
// (openblas_get_corename, OPENBLAS_CORETYPE having been chosen by core/openblas_defaults.cpp),
// and for Eigen the level kernels/cpu was compiled for.
const std::vector<GemmLibrary>& gemm_libraries();

// The library a GEMM of `dtype` (float32 or float64) with inner size k runs on under the selected
// variant. "auto": the first library (in the enum's order) of the highest level any offers for the
// dtype, so never one that runs generic code where another does not; but for k below 16 Eigen, where
// it runs at that level too. A library without the dtype (oneDNN and float64) runs it as "auto" would.
Gemm gemm_library(DType dtype, int64_t k);

// C = alpha op(A) op(B) + beta C on `library` (OneDNN or OpenBLAS), row-major as gemm_serial takes
// it; false, having done nothing, where the library cannot take the operands as they lie (a
// leading dimension it refuses, OpenBLAS's int sizes) or lacks the type.
template <class A>
bool library_gemm(Gemm library, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, A alpha, const A* a,
                  int64_t lda, const A* b, int64_t ldb, A beta, A* c, int64_t ldc);

// C = alpha op(A) op(B) + beta C for kernels that split their own work over threads (matmul,
// fused attention): row-major m x k / k x n operands (op transposes a stored k x m / n x k one)
// with leading dimensions lda, ldb, ldc, on the library gemm_library picks (float, double) or
// Eigen (operands a library cannot take); the integer types in a plain loop. Single-threaded when
// called inside a parallel region (the libraries thread outside one).
template <class A>
void gemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, A alpha, const A* a, int64_t lda,
                 const A* b, int64_t ldb, A beta, A* c, int64_t ldc);

}  // namespace mg::cpu
