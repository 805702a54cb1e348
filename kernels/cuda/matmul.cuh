// The integer matrix product's kernel (matmul.cu launches it for integer and bool products, which
// cuBLAS does not take; tests/cuda runs it on the host): a thread per output element, summed in int64.
#pragma once
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda::matmul_kernels {

template <class T>
__global__ void int_gemm_kernel(const T* a, const T* b, T* out, int64_t B, int64_t M, int64_t K, int64_t N, int64_t as0,
                                int64_t as1, int64_t as2, int64_t bs0, int64_t bs1, int64_t bs2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < B * M * N;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t bb = i / (M * N), m = (i / N) % M, n = i % N, acc = 0;
    for (int64_t k = 0; k < K; ++k)
      acc += int64_t(a[bb * as0 + m * as1 + k * as2]) * int64_t(b[bb * bs0 + k * bs1 + n * bs2]);
    out[i] = dstore<T>(acc);
  }
}

}  // namespace mg::cuda::matmul_kernels
