// The reduction kernels (kernels/cuda/reduce.cuh) emulated on the host against the CPU backend's:
// sum/max/min by rows (a block per row) and by columns (32 x 8 blocks), log-sum-exp both ways, the
// arg reductions both ways, scans and the cumulative product's gradient, over [outer, r, inner]
// views with r = 1, 31, 33, 1025, grids smaller than the work, the dtypes they are instantiated for
// (floating, integer, bool inputs; accumulating outputs of another dtype), NaN and infinities.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/reduce.cuh>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda::reduce_kernels;
using emu::cpu;

struct Layout {
  int64_t outer, r, inner;
};
const Layout kLayouts[] = {{1, 1, 1}, {5, 31, 1}, {3, 1025, 1}, {2, 33, 3}, {3, 31, 40}, {1, 1025, 33}, {2, 0, 3}};

Tensor input(DType t, const Layout& l, uint64_t seed) {
  const Shape s{l.outer, l.r, l.inner};
  if (!is_floating(t)) return emu::ints(s, t, t == kBool ? 0 : -50, t == kBool ? 2 : 50, seed);
  return emu::with_edges(s, t, -3, 3, seed);
}

double sum_tol(DType t, const Layout& l) { return emu::rtol_for(t, 2 * std::sqrt(double(l.r) + 1)); }

}  // namespace

TEST_CASE("reduce_rows_kernel and reduce_cols_kernel: sum, max and min, into their output dtypes") {
  const std::pair<DType, DType> types[] = {{kFloat32, kFloat32}, {kFloat16, kFloat16}, {kBFloat16, kFloat32},
                                           {kFloat64, kFloat64}, {kInt32, kInt64},     {kBool, kInt64},
                                           {kUInt8, kUInt8},     {kInt64, kInt64}};
  for (const Layout& l : kLayouts)
    for (const auto& pair : types) {
      const DType xt = pair.first, ot = pair.second;  // (clang 14: lambdas capture no bindings)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
        if (l.r == 0 && op != ReduceOp::Sum) continue;  // max of nothing: the op refuses it
        if (xt == kBool && op != ReduceOp::Sum) continue;
        CAPTURE(l.outer);
        CAPTURE(l.r);
        CAPTURE(l.inner);
        CAPTURE(int(op));
        const Tensor x = input(xt, l, uint64_t(l.r));
        const Tensor want = empty({l.outer, l.inner}, op == ReduceOp::Sum ? ot : xt),
                     got = empty(want.shape(), want.dtype());
        cpu(&Backend::reduce, op, x, Out(want), l.outer, l.r, l.inner);
        dispatch(xt, [&](auto xtag) {
          using T = typename decltype(xtag)::type;
          dispatch(want.dtype(), [&](auto otag) {
            using O = typename decltype(otag)::type;
            const emu::DeviceTensor dx("x", x), dout = emu::DeviceTensor::output("out", got);
            if (l.inner == 1)
              emu::launch<reduce_rows_kernel<T, O>>({dim3(2), dim3(128)}, dx.ptr<T>(), dout.ptr<O>(), l.outer, l.r, op);
            else
              emu::launch<reduce_cols_kernel<T, O>>({dim3(3), dim3(32, 8)}, dx.ptr<T>(), dout.ptr<O>(), l.outer, l.r,
                                                    l.inner, op);
            dout.download();
          });
        });
        const double tol = is_floating(want.dtype()) && op == ReduceOp::Sum ? sum_tol(want.dtype(), l) : 0;
        emu::check_close(got, want, tol, tol, "reduce, " + emu::name_of(xt) + " -> " + emu::name_of(want.dtype()));
      }
    }
}

TEST_CASE("logsumexp_rows_kernel and logsumexp_cols_kernel") {
  for (const Layout& l : kLayouts)
    for (DType t : emu::floating_dtypes()) {
      if (l.r == 0) continue;
      for (bool edges : {false, true}) {
        CAPTURE(l.r);
        CAPTURE(l.inner);
        const Tensor x = edges ? input(t, l, 3) : emu::uniform({l.outer, l.r, l.inner}, t, -30, 30, 4);
        const Tensor want = empty({l.outer, l.inner}, t), got = empty({l.outer, l.inner}, t);
        cpu(&Backend::reduce, ReduceOp::LogSumExp, x, Out(want), l.outer, l.r, l.inner);
        dispatch_floating(t, "test", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const emu::DeviceTensor dx("x", x), dout = emu::DeviceTensor::output("out", got);
          if (l.inner == 1)
            emu::launch<logsumexp_rows_kernel<T, T>>({dim3(2), dim3(128)}, dx.ptr<T>(), dout.ptr<T>(), l.outer, l.r);
          else
            emu::launch<logsumexp_cols_kernel<T, T>>({dim3(2), dim3(64)}, dx.ptr<T>(), dout.ptr<T>(), l.outer, l.r,
                                                     l.inner);
          dout.download();
        });
        emu::check_close(got, want, sum_tol(t, l), sum_tol(t, l), "logsumexp, " + emu::name_of(t));
      }
    }
}

TEST_CASE("arg_reduce_kernel: both layouts, ties to the lower index, NaN first, with and without values") {
  for (const Layout& l : kLayouts)
    for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8})
      for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
        if (l.r == 0) continue;
        CAPTURE(l.r);
        CAPTURE(l.inner);
        // few distinct values: ties everywhere
        const Tensor x = is_floating(t) && l.r > 40 ? input(t, l, 5) : emu::ints({l.outer, l.r, l.inner}, t, 0, 4, 6);
        const Shape s{l.outer, l.inner};
        const Tensor values = empty(s, t), indices = empty(s, kInt64), got_values = empty(s, t),
                     got_indices = empty(s, kInt64);
        cpu(&Backend::arg_reduce, op, x, Out(values), Out(indices), l.outer, l.r, l.inner);
        for (bool with_values : {true, false}) {
          dispatch(t, [&](auto tag) {
            using T = typename decltype(tag)::type;
            const emu::DeviceTensor dx("x", x), dv = emu::DeviceTensor::output("values", got_values);
            const emu::DeviceTensor di = emu::DeviceTensor::output("indices", got_indices);
            const dim3 grid(l.inner == 1 ? 2 : 3), block(l.inner == 1 ? 128 : 64);
            emu::launch<arg_reduce_kernel<T>>({grid, block}, dx.ptr<T>(), with_values ? dv.ptr<T>() : nullptr,
                                              di.ptr<int64_t>(), l.outer, l.r, l.inner, op == ReduceOp::Max);
            dv.download();
            di.download();
          });
          emu::check_equal(got_indices, indices, "arg_reduce indices, " + emu::name_of(t));
          if (with_values) emu::check_equal(got_values, values, "arg_reduce values, " + emu::name_of(t));
        }
      }
}

TEST_CASE("scan_kernel and cumprod_backward_kernel") {
  const std::pair<DType, DType> types[] = {{kFloat32, kFloat32}, {kFloat16, kFloat16}, {kBFloat16, kBFloat16},
                                           {kFloat64, kFloat64}, {kInt32, kInt64},     {kBool, kInt64}};
  for (const Layout& l : kLayouts)
    for (const auto& pair : types) {
      const DType xt = pair.first, ot = pair.second;  // (clang 14: lambdas capture no bindings)
      for (ScanOp op : {ScanOp::Sum, ScanOp::Prod}) {
        CAPTURE(l.r);
        CAPTURE(l.inner);
        const Shape s{l.outer, l.r, l.inner};
        const bool prod = op == ScanOp::Prod;  // integer products of -1, 0 and 1 cannot overflow
        const Tensor x = is_floating(xt) ? emu::uniform(s, xt, prod ? 0.9 : -2, prod ? 1.1 : 2, 7)
                                         : emu::ints(s, xt,
                                                     xt == kBool ? 0
                                                     : prod      ? -1
                                                                 : -2,
                                                     xt == kBool ? 2 : 3 - prod, 7);
        const Tensor want = empty(s, ot), got = empty(s, ot);
        cpu(&Backend::scan, op, x, Out(want), l.outer, l.r, l.inner);
        dispatch(xt, [&](auto xtag) {
          using T = typename decltype(xtag)::type;
          dispatch(ot, [&](auto otag) {
            using O = typename decltype(otag)::type;
            const emu::DeviceTensor dx("x", x), dout = emu::DeviceTensor::output("out", got);
            emu::launch<scan_kernel<T, O>>({dim3(2), dim3(64)}, dx.ptr<T>(), dout.ptr<O>(), l.outer, l.r, l.inner,
                                           op == ScanOp::Sum);
            dout.download();
          });
        });
        const double tol = is_floating(ot) ? sum_tol(ot, l) : 0;
        emu::check_close(got, want, tol, tol, "scan, " + emu::name_of(xt));
      }
    }
  for (const Layout& l : kLayouts)
    for (DType t : emu::floating_dtypes()) {
      const Shape s{l.outer, l.r, l.inner};
      std::vector<double> xv = emu::uniform(s, t, 0.8, 1.2, 8).to_vector<double>();
      for (int64_t o = 0; l.r > 2 && o < l.outer; ++o)  // zeros at k = 1: the gradient's path past a zero
        for (int64_t i = 0; i < l.inner; ++i) xv[size_t((o * l.r + 1) * l.inner + i)] = 0;
      const Tensor x = tensor(xv, s, kFloat64).to(t);
      const Tensor g = emu::uniform(s, t, -1, 1, 9), y = empty(s, t), want = empty(s, t), got = empty(s, t);
      cpu(&Backend::scan, ScanOp::Prod, x, Out(y), l.outer, l.r, l.inner);
      cpu(&Backend::cumprod_backward, g, x, y, Out(want), l.outer, l.r, l.inner);
      dispatch_floating(t, "test", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const emu::DeviceTensor dg("grad", g), dx("x", x), dy("y", y), dout = emu::DeviceTensor::output("grad_in", got);
        emu::launch<cumprod_backward_kernel<T>>({dim3(2), dim3(64)}, dg.ptr<T>(), dx.ptr<T>(), dy.ptr<T>(),
                                                dout.ptr<T>(), l.outer, l.r, l.inner);
        dout.download();
      });
      emu::check_close(got, want, sum_tol(t, l), sum_tol(t, l), "cumprod_backward, " + emu::name_of(t));
    }
}
