// Indexing on CUDA: index_select, index_add, gather, scatter, scatter_add; indices are checked on
// the device before use (check_indices). The kernels are index.cuh's.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/index.cuh>

namespace mg::cuda {

namespace {

using namespace index_kernels;

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
