// Indexing CUDA kernels. index_select/index_add see contiguous tensors as [outer, size along dim,
// inner]; gather/scatter_add walk the index's shape with the other tensor's strides. Indices are
// checked on the device before use; additions with repeated indices use atomics.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

namespace {

// Calls f(Tag<U>) with an unsigned type as wide as one element: moving bytes needs no dtype.
template <class F>
void dispatch_bytes(size_t element_size, F&& f) {
  switch (element_size) {
    case 1:
      return f(Tag<uint8_t>{});
    case 2:
      return f(Tag<uint16_t>{});
    case 4:
      return f(Tag<uint32_t>{});
    default:
      return f(Tag<uint64_t>{});
  }
}

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
GatherGeom gather_geom(const char* op, const Tensor& index, const Tensor& other, int64_t dim) {
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

}  // namespace

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Out& out) {
  DimSplit s = split_at(x.shape(), dim);
  const int64_t n = index.numel();
  check_indices("index_select", index, s.size);
  if (out.numel() == 0) return;
  cudaStream_t st = stream_for(out);
  dispatch_bytes(x.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    index_select_kernel<<<grid_for(out.numel()), 256, 0, st>>>(dptr<U>(x), dptr<int64_t>(index), dptr<U>(out), s, n);
  });
  check_launch("index_select");
}

void index_add(const Out& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  DimSplit s = split_at(dst.shape(), dim);
  const int64_t n = index.numel();
  check_indices("index_add", index, s.size);
  if (src.numel() == 0) return;
  cudaStream_t st = stream_for(dst);
  dispatch(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    index_add_kernel<<<grid_for(src.numel()), 256, 0, st>>>(dptr<T>(dst), dptr<int64_t>(index), dptr<T>(src), s, n);
  });
  check_launch("index_add");
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Out& out) {
  check_indices("gather", index, x.size(dim));
  const int64_t n = index.numel();
  if (n == 0) return;
  GatherGeom g = gather_geom("gather", index, x, dim);
  cudaStream_t st = stream_for(out);
  dispatch_bytes(x.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    gather_kernel<<<grid_for(n), 256, 0, st>>>(dptr<U>(x), dptr<int64_t>(index), dptr<U>(out), g, n);
  });
  check_launch("gather");
}

void scatter(const Out& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  check_indices("scatter", index, dst.size(dim));
  const int64_t n = index.numel();
  if (n == 0) return;
  GatherGeom g = gather_geom("scatter", index, dst, dim);
  cudaStream_t st = stream_for(dst);
  dispatch_bytes(dst.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    scatter_kernel<<<grid_for(n), 256, 0, st>>>(dptr<U>(dst), dptr<int64_t>(index), dptr<U>(src), g, n);
  });
  check_launch("scatter");
}

void scatter_add(const Out& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  check_indices("scatter_add", index, dst.size(dim));
  const int64_t n = index.numel();
  if (n == 0) return;
  GatherGeom g = gather_geom("scatter_add", index, dst, dim);
  cudaStream_t st = stream_for(dst);
  dispatch(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    scatter_add_kernel<<<grid_for(n), 256, 0, st>>>(dptr<T>(dst), dptr<int64_t>(index), dptr<T>(src), g, n);
  });
  check_launch("scatter_add");
}

}  // namespace mg::cuda
