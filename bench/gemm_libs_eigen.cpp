// Eigen's GEMM for bench_gemm_libs, compiled once per vector ISA level (MG_EIGEN_LEVEL: avx2 with
// -mavx2 -mfma, avx512 with -mavx512f ...): what Eigen would run if memgrad's gemm_serial were compiled
// per level, as the kernels of kernels/cpu are (a default build compiles it for the baseline).
#include <Eigen/Core>

#define MG_CAT2(a, b) a##b
#define MG_CAT(a, b) MG_CAT2(a, b)

namespace {
using Stride = Eigen::OuterStride<>;
using Row = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Col = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class M>
using In = Eigen::Map<const M, 0, Stride>;
}  // namespace

// C = op(A) op(B), row-major, as bench_gemm_libs calls every library; Eigen threads itself (OpenMP)
// when called outside a parallel region.
void MG_CAT(eigen_gemm_, MG_EIGEN_LEVEL)(bool ta, bool tb, long m, long n, long k, const float* a, long lda,
                                         const float* b, long ldb, float* c, long ldc) {
  Eigen::Map<Row, 0, Stride> cm(c, m, n, Stride(ldc));
  auto with_b = [&](const auto& am) {
    if (tb)
      cm.noalias() = am * In<Col>(b, k, n, Stride(ldb));
    else
      cm.noalias() = am * In<Row>(b, k, n, Stride(ldb));
  };
  if (ta)
    with_b(In<Col>(a, m, k, Stride(lda)));
  else
    with_b(In<Row>(a, m, k, Stride(lda)));
}
