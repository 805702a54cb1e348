// Indexing CPU kernels. Tensors are contiguous and viewed as [outer, size along dim, inner].
#include <cstring>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {
void check_indices(const char* op, const int64_t* idx, int64_t n, int64_t size) {
  for (int64_t k = 0; k < n; ++k)
    MG_CHECK(idx[k] >= 0 && idx[k] < size, IndexError, op, ": expected indices in [0, ", size, "), got ", idx[k],
             " at position ", k);
}
}  // namespace

void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Out& out) {
  DimSplit s = split_at(x.shape(), dim);
  const int64_t n = index.numel(), es = int64_t(x.element_size());
  const int64_t* idx = ptr<int64_t>(index);
  check_indices("index_select", idx, n, s.size);
  const char* xp = static_cast<const char*>(x.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  parallel_for(s.outer * n, s.outer * n * s.inner >= kParallelGrain, [&](int64_t l) {
    int64_t o = l / n, k = l % n;
    std::memcpy(op + (o * n + k) * s.inner * es, xp + (o * s.size + idx[k]) * s.inner * es, size_t(s.inner * es));
  });
}

void index_add(const Out& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  DimSplit s = split_at(dst.shape(), dim);
  const int64_t n = index.numel();
  const int64_t* idx = ptr<int64_t>(index);
  check_indices("index_add", idx, n, s.size);
  dispatch(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dp = ptr<T>(dst);
    const T* sp = ptr<T>(src);
    // Threads own disjoint (outer, inner) columns, so repeated indices never race.
    parallel_for(s.outer * s.inner, s.outer * n * s.inner >= kParallelGrain, [&](int64_t l) {
      int64_t o = l / s.inner, i = l % s.inner;
      for (int64_t k = 0; k < n; ++k) {
        T& d = dp[(o * s.size + idx[k]) * s.inner + i];
        d = store<T>(load(d) + load(sp[(o * n + k) * s.inner + i]));
      }
    });
  });
}

namespace {
// Calls f(position in index/out, offset in x with the dim coordinate replaced by the index).
template <class F>
void for_each_gather(const Shape& ishape, const Strides& xstrides, int64_t dim, const int64_t* idx, F f) {
  const int64_t n = numel_of(ishape), nd = int64_t(ishape.size());
  for (int64_t p = 0; p < n; ++p) {
    int64_t rem = p, off = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t c = rem % ishape[d];
      rem /= ishape[d];
      off += (d == dim ? idx[p] : c) * xstrides[d];
    }
    f(p, off);
  }
}
void check_gather(const char* op, const Tensor& index, int64_t size) {
  check_indices(op, ptr<int64_t>(index), index.numel(), size);
}
}  // namespace

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Out& out) {
  check_gather("gather", index, x.size(dim));
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = ptr<T>(x);
    T* op = ptr<T>(out);
    for_each_gather(index.shape(), x.strides(), dim, ptr<int64_t>(index),
                    [&](int64_t p, int64_t off) { op[p] = xp[off]; });
  });
}

namespace {
// scatter (add = false) or scatter_add: src[p] written or added at p's place in dst.
void scatter_into(const char* op, const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src, bool add) {
  check_gather(op, index, dst.size(dim));
  dispatch(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dp = ptr<T>(dst);
    const T* sp = ptr<T>(src);
    for_each_gather(index.shape(), dst.strides(), dim, ptr<int64_t>(index),
                    [&](int64_t p, int64_t off) { dp[off] = add ? store<T>(load(dp[off]) + load(sp[p])) : sp[p]; });
  });
}
}  // namespace

void scatter(const Out& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_into("scatter", dst, dim, index, src, false);
}
void scatter_add(const Out& dst, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_into("scatter_add", dst, dim, index, src, true);
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
