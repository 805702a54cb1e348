// Indexing kernels (index.cu launches them; tests/cuda runs them on the host). index_select and
// index_add see contiguous tensors as [outer, size along dim, inner]; gather/scatter/scatter_add walk
// the index's shape with the other tensor's strides; additions with repeated indices use atomics.
#pragma once
#include <memgrad/core/error.h>
#include <memgrad/core/tensor.h>
#include <memgrad/kernels/backend.h>
#include <memgrad/kernels/cuda/device_common.cuh>
#include <memgrad/kernels/cuda/map.cuh>

namespace mg::cuda::index_kernels {

template <class U>
__global__ void index_select_kernel(const U* x, const int64_t* idx, U* out, DimSplit s, int64_t n) {
  const int64_t total = s.outer * n * s.inner;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = e / (n * s.inner), k = (e / s.inner) % n, i = e % s.inner;
    out[e] = x[(o * s.size + idx[k]) * s.inner + i];
  }
}

template <class T>
__global__ void index_add_kernel(T* dst, const int64_t* idx, const T* src, DimSplit s, int64_t n) {
  const int64_t total = s.outer * n * s.inner;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = e / (n * s.inner), k = (e / s.inner) % n, i = e % s.inner;
    atomic_add(dst + (o * s.size + idx[k]) * s.inner + i, dload(src[e]));
  }
}

// The index's shape and the strides of the tensor it addresses.
struct GatherGeom {
  int nd = 0, dim = 0;
  int64_t size[kMaxDims], stride[kMaxDims];
  __device__ __forceinline__ int64_t offset(int64_t p, const int64_t* idx) const {
    int64_t off = 0, rem = p;
    for (int d = nd - 1; d >= 0; --d) {
      int64_t c = rem % size[d];
      rem /= size[d];
      off += (d == dim ? idx[p] : c) * stride[d];
    }
    return off;
  }
};
inline GatherGeom gather_geom(const char* op, const Tensor& index, const Tensor& other, int64_t dim) {
  MG_CHECK(index.dim() <= kMaxDims, NotImplementedError, op, ": the cuda backend handles at most ", kMaxDims,
           " dims, got ", index.dim());
  GatherGeom g;
  g.nd = int(index.dim());
  g.dim = int(dim);
  for (int d = 0; d < g.nd; ++d) g.size[d] = index.size(d), g.stride[d] = other.stride(d);
  return g;
}

template <class U>
__global__ void gather_kernel(const U* x, const int64_t* idx, U* out, GatherGeom g, int64_t n) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x)
    out[p] = x[g.offset(p, idx)];
}

template <class U>
__global__ void scatter_kernel(U* dst, const int64_t* idx, const U* src, GatherGeom g, int64_t n) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x)
    dst[g.offset(p, idx)] = src[p];
}

template <class T>
__global__ void scatter_add_kernel(T* dst, const int64_t* idx, const T* src, GatherGeom g, int64_t n) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x)
    atomic_add(dst + g.offset(p, idx), dload(src[p]));
}

}  // namespace mg::cuda::index_kernels
