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

// matmul's variants, in the order "auto" prefers the libraries where they run at the same level and
// its table (below) says nothing else: oneDNN (float32 only: it has no float64 GEMM), OpenBLAS, Eigen.
enum class Gemm { Auto, OneDNN, OpenBLAS, Eigen };

// The kinds of product "auto"'s table tells apart, by the product one gemm_serial call computes (after
// matmul's split over threads), in this order: Small, at most 2^21 multiply-adds (attention's per-head
// products and the fused attention's tiles); WeightGradient, a transposed left operand with an inner
// size of 512 or more (a linear layer's dW = g^T x, the inner size its rows); FewRows, at most 256 rows
// (a batch of 256 tokens or samples, or a part of such a product); Large, the rest.
enum class GemmClass { Small, WeightGradient, FewRows, Large };
GemmClass gemm_class(bool trans_a, int64_t m, int64_t n, int64_t k);
const char* to_string(GemmClass c);

// The library "auto"'s table prefers for float32 products of class c on this CPU (its vendor and
// cpu_isa()), measured there (bench/RESULTS.md, issue 46), or Auto where the table has no row for
// this CPU, which leaves the order of the enum. The library runs only if it runs at the level of the
// best library: the table never picks one that runs generic code where another does not.
Gemm gemm_preferred(GemmClass c);

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

// The library a GEMM of `dtype` (float32 or float64) of op(A) m x k by k x n (trans_a: A transposed)
// runs on under the selected variant. "auto": among the libraries of the highest level any offers for
// the dtype (so never one that runs generic code where another does not), the one gemm_preferred
// names for float32, else the first in the enum's order; but for k below 16 Eigen, where it runs at
// that level too. It depends on the CPU, the environment the libraries read and the shape only, never
// on a timing: every process on a machine picks the same library for the same product. A library
// without the dtype (oneDNN and float64) runs it as "auto" would.
Gemm gemm_library(DType dtype, bool trans_a, int64_t m, int64_t n, int64_t k);

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
