// Batched GEMM through cuBLAS (float32, TF32 when allowed, float16/bfloat16 with float32
// accumulation, float64); integer and bool products use a plain kernel. Operands whose matrix
// strides cuBLAS can express (either stride 1) are used in place; others are copied contiguous.
#include <cublas_v2.h>

#include <climits>

#include <memgrad/kernels/blas_layout.h>
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/matmul.cuh>

namespace mg::cuda {

namespace {

using namespace matmul_kernels;

const char* status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}
void check(cublasStatus_t s, const char* what) {
  MG_CHECK(s == CUBLAS_STATUS_SUCCESS, DeviceError, "matmul: ", what, " failed: ", status_name(s));
}

// A row-major R x C matrix (per batch) as cuBLAS sees it: column-major data, transposed or not,
// with leading dimension and batch stride. `t` is one cuBLAS can read (matmul_scratch copied it if not).
struct Operand {
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 1, batch_stride = 0;
};
Operand operand(const Tensor& t, int64_t R, int64_t C) {
  const BlasLayout l = blas_layout(R, C, t.stride(1), t.stride(2));
  return {l.kind == BlasLayout::Columns ? CUBLAS_OP_T : CUBLAS_OP_N, l.ld, t.size(0) == 1 ? 0 : t.stride(0)};
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Out& out) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  if (out.numel() == 0) return;
  if (K == 0) return fill(out, 0.0);
  cudaStream_t s = stream_for(out);
  const DType t = out.dtype();
  if (!is_floating(t)) {
    dispatch(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>)
        int_gemm_kernel<<<grid_for(B * M * N), 256, 0, s>>>(dptr<T>(a), dptr<T>(b), dptr<T>(out), B, M, K, N,
                                                            a.stride(0), a.stride(1), a.stride(2), b.stride(0),
                                                            b.stride(1), b.stride(2));
    });
    return check_launch("matmul");
  }
  for (int64_t v : {B, M, N, K})
    MG_CHECK(v < INT_MAX, NotImplementedError, "matmul: cuBLAS takes 32-bit sizes, got [", B, ", ", M, ", ", K, "] @ [",
             B, ", ", K, ", ", N, "]");
  const std::vector<Tensor> g = matmul_scratch(a, b, out);  // a and b, or the copies cuBLAS reads
  const Operand x = operand(g[0], M, K), y = operand(g[1], K, N);
  auto& hd = library_handle<cublasHandle_t>(out.device().index,
                                            [](cublasHandle_t* h) { check(cublasCreate(h), "cublasCreate"); });
  std::lock_guard<std::mutex> lock(hd.mu);  // another thread may set the handle's stream in between
  check(cublasSetStream(hd.h, s), "cublasSetStream");
  cudaDataType_t type = t == kFloat16    ? CUDA_R_16F
                        : t == kBFloat16 ? CUDA_R_16BF
                        : t == kFloat64  ? CUDA_R_64F
                                         : CUDA_R_32F;
  cublasComputeType_t compute = t == kFloat64                   ? CUBLAS_COMPUTE_64F
                                : t == kFloat32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                : CUBLAS_COMPUTE_32F;
  const float one_f = 1, zero_f = 0;
  const double one_d = 1, zero_d = 0;
  const void* alpha = t == kFloat64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = t == kFloat64 ? static_cast<const void*>(&zero_d) : &zero_f;
  // out^T (N x M, column-major) = op(b)^T (N x K) * op(a)^T (K x M)
  check(cublasGemmStridedBatchedEx(hd.h, y.op, x.op, int(N), int(M), int(K), alpha, dptr<char>(g[1]), type, int(y.ld),
                                   y.batch_stride, dptr<char>(g[0]), type, int(x.ld), x.batch_stride, beta,
                                   dptr<char>(out), type, int(std::max<int64_t>(N, 1)), M * N, int(B), compute,
                                   CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
}

}  // namespace mg::cuda
