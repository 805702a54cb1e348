// The index fills, dropout and bias_dropout_add (kernels/cuda/elementwise.cuh), emulated on the
// host against the CPU backend's kernels bit for bit: the counter-based generator gives both the
// same draws, so ranges, uniform, normal and randint fills, and dropout's masks, agree exactly.
// Generator offsets that are and are not multiples of 4 (dropout's four draws per Philox block),
// grids smaller than the work, sizes 1, 31, 33, 1025, 65537; p = 0, 1 and between.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/elementwise.cuh>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda::elementwise_kernels;
using emu::cpu;

const int64_t kSizes[] = {1, 31, 33, 1025, 65537};

template <class T, class F>
void check_fill(const char* what, const Tensor& want, F f) {
  const Tensor got = empty(want.shape(), want.dtype());
  const emu::DeviceTensor out = emu::DeviceTensor::output("out", got);
  emu::launch<fill_indexed_kernel<T, F>>({dim3(3), dim3(64)}, out.ptr<T>(), got.numel(), f);
  out.download();
  emu::check_equal(got, want, std::string(what) + ", " + emu::name_of(want.dtype()));
}

}  // namespace

TEST_CASE("fill_indexed_kernel: ranges and random fills, bit for bit") {
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8, kInt8})
    for (int64_t n : kSizes) {
      if (dtype_size(t) == 1 && n > 33) continue;  // a range past 8 bits: no value to compare
      CAPTURE(n);
      dispatch(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const Tensor range = empty({n}, t), uni = empty({n}, t), nor = empty({n}, t), ri = empty({n}, t);
        const double start = t == kUInt8 ? 3.0 : -3.0, step = is_floating(t) ? 0.5 : 1.0;  // values the dtype holds
        cpu(&Backend::fill_range, Out(range), start, step);
        check_fill<T>("fill_range", range, RangeFn{start, step});
        const int64_t lo = t == kUInt8 ? 0 : -5, hi = t == kUInt8 || t == kInt8 ? 100 : 1000;
        cpu(&Backend::randint, Out(ri), 77, 6, lo, hi);
        check_fill<T>("randint", ri, RandintFn{77, 6, uint64_t(hi - lo), lo});
        if (!is_floating(t)) return;
        cpu(&Backend::uniform, Out(uni), 77, 5, -2.0, 3.0);
        check_fill<T>("uniform", uni, UniformFn{77, 5, -2.0, 3.0});
        cpu(&Backend::normal, Out(nor), 78, 12, 1.0, 2.0);
        check_fill<T>("normal", nor, NormalFn{78, 12, 1.0, 2.0});
      });
    }
}

TEST_CASE("dropout_kernel and bias_dropout_add_kernel: the CPU's masks and roundings, bit for bit") {
  for (DType t : emu::floating_dtypes())
    for (int64_t n : kSizes)
      for (uint64_t offset : {uint64_t(0), uint64_t(6)})
        for (double p : {0.0, 0.3, 1.0}) {
          CAPTURE(n);
          CAPTURE(offset);
          CAPTURE(p);
          const Tensor x = emu::with_edges({n}, t, -2, 2, uint64_t(n));
          const Tensor want = empty({n}, t), got = empty({n}, t);
          cpu(&Backend::dropout, x, Out(want), p, 99, offset);
          dispatch_floating(t, "test", [&](auto tag) {
            using T = typename decltype(tag)::type;
            using A = opmath_t<T>;
            const emu::DeviceTensor dx("x", x), dout = emu::DeviceTensor::output("out", got);
            emu::launch<dropout_kernel<T, A>>({dim3(2), dim3(64)}, dx.ptr<T>(), dout.ptr<T>(), n, float(p),
                                              A(1.0 / (1.0 - p)), uint64_t(99), offset);
            dout.download();
          });
          emu::check_equal(got, want, "dropout, " + emu::name_of(t));

          if (n % 33 != 0 && n != 1) continue;  // bias_dropout_add: rows of 33 (and one of 1)
          const int64_t cols = n == 1 ? 1 : 33;
          const Tensor bias = emu::uniform({cols}, t, -1, 1, 3), residual = emu::uniform({n / cols, cols}, t, -1, 1, 4);
          const Tensor x2 = x.view({n / cols, cols}), want2 = empty({n / cols, cols}, t),
                       got2 = empty({n / cols, cols}, t);
          cpu(&Backend::bias_dropout_add, x2, bias, residual, Out(want2), p, 99, offset);
          dispatch_floating(t, "test", [&](auto tag) {
            using T = typename decltype(tag)::type;
            using A = opmath_t<T>;
            const emu::DeviceTensor dx("x", x2), db("bias", bias), dr("residual", residual);
            const emu::DeviceTensor dout = emu::DeviceTensor::output("out", got2);
            const int mode = p <= 0 ? 0 : p >= 1 ? 1 : 2;
            emu::launch<bias_dropout_add_kernel<T, A>>({dim3(2), dim3(64)}, dx.ptr<T>(), db.ptr<T>(), dr.ptr<T>(),
                                                       dout.ptr<T>(), n, cols, mode, float(p), A(1.0 / (1.0 - p)),
                                                       uint64_t(99), offset);
            dout.download();
          });
          emu::check_equal(got2, want2, "bias_dropout_add, " + emu::name_of(t));
        }
}
