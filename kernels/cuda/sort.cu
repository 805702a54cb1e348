// Sorting along a dim of a contiguous [outer, r, inner] view: a block per line runs sort.cuh's
// bitonic network, stable like the CPU's sort.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/sort.cuh>

namespace mg::cuda {

using namespace sort_kernels;

void sort(const Tensor& x, const Out& values, const Out& indices, int64_t outer, int64_t r, int64_t inner,
          bool descending) {
  if (values.numel() == 0) return;
  cudaStream_t s = stream_for(values);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    sort_kernel<<<grid_for(outer * inner, 1), kThreads, 0, s>>>(dptr<T>(x), dptr<T>(values), dptr<int64_t>(indices),
                                                                outer, r, inner, descending);
  });
  check_launch("sort");
}

}  // namespace mg::cuda
