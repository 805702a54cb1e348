// The softmax kernels (kernels/cuda/softmax.cuh) emulated on the host against the CPU backend's:
// softmax and log-softmax by rows (a block per row) and by lines (a thread per line of [outer, r,
// inner]), their backward, and the attention scores' scaled, masked softmax with no mask, bool and
// additive masks broadcast over heads and queries, causal or not, rows that see no key; rows of 1,
// 31, 33 and 1025, grids smaller than the work, every floating dtype, infinities among the inputs.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/softmax.cuh>

#include <memgrad/ops/op_util.h>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda::softmax_kernels;
using emu::cpu;

struct Layout {
  int64_t outer, r, inner;
};
const Layout kLayouts[] = {{1, 1, 1}, {5, 31, 1}, {3, 1025, 1}, {2, 33, 3}, {3, 31, 40}, {0, 5, 1}};

double tol(DType t, const Layout& l) { return emu::rtol_for(t, 4 * std::sqrt(double(l.r) + 1)); }

// x with some -inf (a masked score) and a row of -inf only when there are rows to spare.
Tensor scores(DType t, const Layout& l, uint64_t seed) {
  std::vector<double> v = emu::uniform({l.outer, l.r, l.inner}, kFloat64, -6, 6, seed).to_vector<double>();
  for (size_t i = 0; i < v.size(); i += 7) v[i] = -INFINITY;
  return tensor(v, {l.outer, l.r, l.inner}, kFloat64).to(t);
}

}  // namespace

TEST_CASE("softmax_kernel and softmax_backward_kernel: rows and lines, softmax and log-softmax") {
  for (const Layout& l : kLayouts)
    for (DType t : emu::floating_dtypes())
      for (bool log : {false, true}) {
        CAPTURE(l.r);
        CAPTURE(l.inner);
        CAPTURE(log);
        const Shape s{l.outer, l.r, l.inner};
        const Tensor x = emu::uniform(s, t, -6, 6, uint64_t(l.r)), g = emu::uniform(s, t, -1, 1, 2);
        const Tensor y = empty(s, t), got = empty(s, t), gi = empty(s, t), got_gi = empty(s, t);
        cpu(&Backend::softmax, x, Out(y), l.outer, l.r, l.inner, log);
        cpu(&Backend::softmax_backward, g, y, Out(gi), l.outer, l.r, l.inner, log);
        dispatch_floating(t, "test", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const emu::Config c = l.inner == 1 ? emu::Config{dim3(2), dim3(128)} : emu::Config{dim3(2), dim3(64)};
          const emu::DeviceTensor dx("x", x), dy("y", y), dg("grad", g);
          const emu::DeviceTensor out = emu::DeviceTensor::output("out", got),
                                  dgi = emu::DeviceTensor::output("grad_in", got_gi);
          emu::launch<softmax_kernel<T>>(c, dx.ptr<T>(), out.ptr<T>(), l.outer, l.r, l.inner, log);
          emu::launch<softmax_backward_kernel<T>>(c, dg.ptr<T>(), dy.ptr<T>(), dgi.ptr<T>(), l.outer, l.r, l.inner,
                                                  log);
          out.download();
          dgi.download();
        });
        emu::check_close(got, y, tol(t, l), tol(t, l) / 8, "softmax, " + emu::name_of(t));
        emu::check_close(got_gi, gi, tol(t, l), tol(t, l) / 8, "softmax_backward, " + emu::name_of(t));
      }
  for (DType t : emu::floating_dtypes()) {  // -inf in the rows
    const Layout l{4, 33, 1};
    const Tensor x = scores(t, l, 3), y = empty(x.shape(), t), got = empty(x.shape(), t);
    cpu(&Backend::softmax, x, Out(y), l.outer, l.r, l.inner, false);
    dispatch_floating(t, "test", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const emu::DeviceTensor dx("x", x), out = emu::DeviceTensor::output("out", got);
      emu::launch<softmax_kernel<T>>({dim3(3), dim3(64)}, dx.ptr<T>(), out.ptr<T>(), l.outer, l.r, l.inner, false);
      out.download();
    });
    emu::check_close(got, y, tol(t, l), tol(t, l) / 8, "softmax with -inf, " + emu::name_of(t));
  }
}

TEST_CASE("scaled_masked_softmax_kernel: masks broadcast over heads and queries, causal, rows that see nothing") {
  using Kind = AttentionMask::Kind;
  struct Case {
    int64_t BH, Tq, Tk;
    Kind kind;
    bool causal;
    Shape mask_shape;  // broadcast to [BH, Tq, Tk]
  };
  const Case cases[] = {{2, 5, 33, Kind::None, true, {}},
                        {3, 31, 31, Kind::Bool, false, {31, 31}},
                        {2, 4, 1025, Kind::Additive, false, {2, 1, 1025}},
                        {1, 1, 1, Kind::None, false, {}},
                        {4, 9, 40, Kind::Bool, true, {4, 9, 40}},
                        {2, 7, 64, Kind::Additive, true, {7, 64}}};
  for (const Case& c : cases)
    for (DType t : emu::floating_dtypes()) {
      CAPTURE(c.Tk);
      CAPTURE(int(c.kind));
      const Shape s{c.BH, c.Tq, c.Tk};
      const Tensor x = emu::uniform(s, t, -4, 4, uint64_t(c.Tk));
      Tensor mask;
      AttentionMask m;
      if (c.kind != Kind::None) {
        const bool is_bool = c.kind == Kind::Bool;
        Tensor base = is_bool ? emu::ints(c.mask_shape, kBool, 0, 2, 4) : emu::uniform(c.mask_shape, t, -3, 1, 4);
        if (is_bool) base.select(int64_t(c.mask_shape.size()) - 2, 0).fill_(false);  // query 0 sees no key
        mask = base.expand(s);
        m = detail::describe_mask(mask, is_bool);
      }
      const Tensor want = empty(s, t), got = empty(s, t);
      cpu(&Backend::scaled_masked_softmax, x, mask, Out(want), 0.37, c.causal, m);
      dispatch_floating(t, "test", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const emu::DeviceTensor dx("x", x), dm("mask", mask), out = emu::DeviceTensor::output("out", got);
        emu::launch<scaled_masked_softmax_kernel<T>>({dim3(3), dim3(128)}, dx.ptr<T>(), dm.ptr<char>(), out.ptr<T>(),
                                                     c.BH, c.Tq, c.Tk, 0.37, c.causal, m);
        out.download();
      });
      const double r = emu::rtol_for(t, 4 * std::sqrt(double(c.Tk)));
      emu::check_close(got, want, r, r / 8, "scaled_masked_softmax, " + emu::name_of(t));
    }
}
