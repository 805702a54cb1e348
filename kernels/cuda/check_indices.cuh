// check_indices' kernel (common.cu launches it; tests/cuda runs it on the host).
#pragma once
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda::index_kernels {

// Records the smallest position whose index is out of range.
__global__ void bad_index_kernel(const int64_t* idx, int64_t n, int64_t size, int64_t ignore,
                                 unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t v = idx[i];
    if (v != ignore && (v < 0 || v >= size)) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

}  // namespace mg::cuda::index_kernels
