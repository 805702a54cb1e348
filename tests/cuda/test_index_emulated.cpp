// The indexing kernels (kernels/cuda/index.cuh, check_indices.cuh) emulated on the host against the
// CPU backend's: index_select and index_add along each dim, gather from strided inputs, scatter into
// strided outputs, scatter_add and index_add with repeated indices through atomic_add (floating,
// 16-bit, integer, 8-bit and bool destinations), and the index check's first bad position.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/check_indices.cuh>
#include <memgrad/kernels/cuda/index.cuh>

#include <algorithm>
#include <numeric>
#include <random>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda::index_kernels;
using emu::cpu;

// Calls f(Tag<U>) with an unsigned type as wide as one element, as index.cu moves bytes.
template <class F>
void by_width(size_t bytes, F&& f) {
  if (bytes == 1) return f(Tag<uint8_t>{});
  if (bytes == 2) return f(Tag<uint16_t>{});
  if (bytes == 4) return f(Tag<uint32_t>{});
  f(Tag<uint64_t>{});
}

const DType kAll[] = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8, kInt8, kBool};

Tensor values(const Shape& s, DType t, uint64_t seed) {
  return is_floating(t) ? emu::uniform(s, t, -2, 2, seed) : emu::ints(s, t, 0, t == kBool ? 2 : 5, seed);
}

const emu::Config kGrid{dim3(2), dim3(64)};

}  // namespace

TEST_CASE("bad_index_kernel: the first index out of range, ignore_index let through") {
  for (int64_t n : {int64_t(1), int64_t(33), int64_t(1025)})
    for (int64_t bad_at : {int64_t(-1), int64_t(0), n / 2, n - 1}) {
      std::vector<int64_t> idx = emu::ints({n}, kInt64, 0, 10, uint64_t(n)).to_vector<int64_t>();
      if (n > 3) idx[1] = -100;  // ignore_index
      if (bad_at >= 0) idx[size_t(bad_at)] = bad_at % 2 ? 10 : -3;
      if (bad_at >= 0 && bad_at + 2 < n) idx[size_t(bad_at + 2)] = 11;  // a later one
      const emu::Buffer<int64_t> d("index", idx);
      emu::Buffer<unsigned long long> first("first_bad", std::vector<unsigned long long>{~0ull});
      emu::launch<bad_index_kernel>(kGrid, d.data(), n, int64_t(10), int64_t(-100), first.data());
      CHECK(first.to_vector()[0] == (bad_at < 0 ? ~0ull : (unsigned long long)bad_at));
    }
}

TEST_CASE("index_select_kernel and index_add_kernel along each dim, repeated indices") {
  for (DType t : kAll)
    for (int64_t dim : {0, 1, 2}) {
      CAPTURE(dim);
      const Shape xs{4, 33, 5};
      const int64_t size = xs[size_t(dim)], n = 37;  // more indices than the dim: repeats
      const Tensor index = emu::ints({n}, kInt64, 0, size, uint64_t(dim));
      const Tensor x = values(xs, t, 1);
      Shape os = xs;
      os[size_t(dim)] = n;
      const Tensor want = empty(os, t), got = empty(os, t);
      cpu(&Backend::index_select, x, dim, index, Out(want));
      const DimSplit s = split_at(x.shape(), dim);
      by_width(x.element_size(), [&](auto tag) {
        using U = typename decltype(tag)::type;
        const emu::DeviceTensor dx("x", x), di("index", index), dout = emu::DeviceTensor::output("out", got);
        emu::launch<index_select_kernel<U>>(kGrid, dx.ptr<U>(), di.ptr<int64_t>(), dout.ptr<U>(), s, n);
        dout.download();
      });
      emu::check_equal(got, want, "index_select, " + emu::name_of(t));

      const Tensor src = values(os, t, 2), dst = values(xs, t, 3), got_dst = dst.clone();
      cpu(&Backend::index_add, Out(dst), dim, index, src);
      dispatch(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const emu::DeviceTensor dd("dst", got_dst), di("index", index), ds("src", src);
        emu::launch<index_add_kernel<T>>(kGrid, dd.ptr<T>(), di.ptr<int64_t>(), ds.ptr<T>(), s, n);
        dd.download();
      });
      // repeated indices add in another order, and the device rounds to 16 bits after each atomic add
      const double tol = is_floating(t) ? emu::rtol_for(t, 16) : 0;
      emu::check_close(got_dst, dst, tol, tol, "index_add, " + emu::name_of(t));
    }
}

TEST_CASE("gather_kernel, scatter_kernel and scatter_add_kernel with strided operands") {
  std::mt19937 rng(5);
  for (DType t : kAll)
    for (int64_t dim : {0, 1}) {
      CAPTURE(dim);
      // gather from a transposed [33, 7] view with a [20, 7] or [33, 5] index
      const Tensor x = values({7, 33}, t, 4).t();
      const Shape is = dim == 0 ? Shape{20, 7} : Shape{33, 5};
      const Tensor index = emu::ints(is, kInt64, 0, x.size(dim), uint64_t(dim) + 7);
      const Tensor want = empty(is, t), got = empty(is, t);
      cpu(&Backend::gather, x, dim, index, Out(want));
      by_width(x.element_size(), [&](auto tag) {
        using U = typename decltype(tag)::type;
        const GatherGeom g = gather_geom("gather", index, x, dim);
        const emu::DeviceTensor dx("x", x), di("index", index), dout = emu::DeviceTensor::output("out", got);
        emu::launch<gather_kernel<U>>(kGrid, dx.ptr<U>(), di.ptr<int64_t>(), dout.ptr<U>(), g, index.numel());
        dout.download();
      });
      emu::check_equal(got, want, "gather, " + emu::name_of(t));

      // scatter into a transposed [33, 7] view: indices distinct along dim (which write wins is unspecified)
      const Tensor base = values({7, 33}, t, 5), dst = base.t(), got_base = base.clone(), got_dst = got_base.t();
      const Shape ss = dim == 0 ? Shape{20, 7} : Shape{33, 5};
      std::vector<int64_t> unique(size_t(numel_of(ss)));
      for (int64_t line = 0; line < (dim == 0 ? ss[1] : ss[0]); ++line) {
        std::vector<int64_t> perm(size_t(dst.size(dim)));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t k = 0; k < ss[size_t(dim)]; ++k)
          unique[size_t(dim == 0 ? k * ss[1] + line : line * ss[1] + k)] = perm[size_t(k)];
      }
      const Tensor sindex = tensor(unique, ss, kInt64), src = values(ss, t, 6);
      cpu(&Backend::scatter, Out(dst), dim, sindex, src);
      by_width(dst.element_size(), [&](auto tag) {
        using U = typename decltype(tag)::type;
        const GatherGeom g = gather_geom("scatter", sindex, got_dst, dim);
        const emu::DeviceTensor dd("dst", got_dst), di("index", sindex), ds("src", src);
        emu::launch<scatter_kernel<U>>(kGrid, dd.ptr<U>(), di.ptr<int64_t>(), ds.ptr<U>(), g, sindex.numel());
        dd.download();
      });
      emu::check_equal(got_dst, dst, "scatter, " + emu::name_of(t));

      // scatter_add: repeated indices add up
      const Tensor abase = values({7, 33}, t, 8), adst = abase.t(), got_abase = abase.clone(), got_adst = got_abase.t();
      const Tensor asrc = values(is, t, 9);
      cpu(&Backend::scatter_add, Out(adst), dim, index, asrc);
      dispatch(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const GatherGeom g = gather_geom("scatter_add", index, got_adst, dim);
        const emu::DeviceTensor dd("dst", got_adst), di("index", index), ds("src", asrc);
        emu::launch<scatter_add_kernel<T>>(kGrid, dd.ptr<T>(), di.ptr<int64_t>(), ds.ptr<T>(), g, index.numel());
        dd.download();
      });
      const double tol = is_floating(t) ? emu::rtol_for(t, 16) : 0;  // as index_add's
      emu::check_close(got_adst, adst, tol, tol, "scatter_add, " + emu::name_of(t));
    }
}
