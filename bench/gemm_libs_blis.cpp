// BLIS for bench_gemm_libs, in a file of its own: blis.h declares its own CBLAS, which clashes with
// OpenBLAS's cblas.h. Only BLIS's typed API is called, whose bli_ names OpenBLAS does not have.
#include <blis.h>

#include <string>

std::string blis_describe() {
  return std::string("BLIS ") + bli_info_get_version_str() + ", config " + bli_arch_string(bli_arch_query_id());
}

// C = op(A) op(B), row-major (A stored k x m when ta, B n x k when tb), on `threads` threads.
void blis_gemm(bool ta, bool tb, long m, long n, long k, const float* a, long lda, const float* b, long ldb, float* c,
               long ldc, int threads) {
  float one = 1, zero = 0;
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(threads, &rntm);
  // Each operand as general strides (row stride, column stride) of op(X) itself.
  const inc_t rsa = ta ? 1 : lda, csa = ta ? lda : 1, rsb = tb ? 1 : ldb, csb = tb ? ldb : 1;
  bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<float*>(a), rsa, csa,
               const_cast<float*>(b), rsb, csb, &zero, c, ldc, 1, nullptr, &rntm);
}
