// The sorting kernel (sort.cu launches it; tests/cuda runs it on the host), along a dim of a
// contiguous [outer, r, inner] view. A block per line runs a bitonic sorting network in place on
// the outputs (values and indices, in global memory): the line is padded in thought to a power of
// two with elements after everything, which never move, so comparators that reach past the end are
// skipped. Ties are broken by the original index, so the result is the CPU's stable sort.
#pragma once
#include <memgrad/kernels/scan.h>
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda::sort_kernels {

template <class T>
__global__ void sort_kernel(const T* x, T* values, int64_t* indices, int64_t outer, int64_t r, int64_t inner,
                            bool descending) {
  int64_t padded = 1;
  while (padded < r) padded <<= 1;
  for (int64_t line = blockIdx.x; line < outer * inner; line += gridDim.x) {
    const int64_t base = (line / inner) * r * inner + line % inner;
    T* v = values + base;
    int64_t* ix = indices + base;
    for (int64_t k = threadIdx.x; k < r; k += blockDim.x) {
      v[k * inner] = x[base + k * inner];
      ix[k * inner] = k;
    }
    __syncthreads();
    // Leaves the earlier of elements i < j (in value order, then index order) at i.
    auto exchange = [&](int64_t i, int64_t j) {
      const T vi = v[i * inner], vj = v[j * inner];
      const int64_t ii = ix[i * inner], ij = ix[j * inner];
      const auto ai = dload(vi), aj = dload(vj);
      const bool swap = sorts_before(aj, ai, descending) || (!sorts_before(ai, aj, descending) && ij < ii);
      if (swap) {
        v[i * inner] = vj, v[j * inner] = vi;
        ix[i * inner] = ij, ix[j * inner] = ii;
      }
    };
    for (int64_t size = 2; size <= padded; size <<= 1) {
      // Merge sorted halves of each block of `size`: first compare mirrored positions ...
      for (int64_t t = threadIdx.x; t < padded / 2; t += blockDim.x) {
        const int64_t i = t / (size / 2) * size + t % (size / 2), j = i ^ (size - 1);
        if (j < r) exchange(i, j);
      }
      __syncthreads();
      // ... then half-cleaners at distances size / 4, ..., 1.
      for (int64_t dist = size / 4; dist >= 1; dist >>= 1) {
        for (int64_t t = threadIdx.x; t < padded / 2; t += blockDim.x) {
          const int64_t i = t / dist * 2 * dist + t % dist, j = i + dist;
          if (j < r) exchange(i, j);
        }
        __syncthreads();
      }
    }
  }
}

}  // namespace mg::cuda::sort_kernels
