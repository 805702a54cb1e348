// The sorting kernel (kernels/cuda/sort.cuh) emulated on the host against the CPU backend's stable
// sort: ascending and descending lines of 1, 31, 33 and 1025 elements (not powers of two: the
// network's padding), lines strided by `inner`, ties, NaN and infinities, more lines than blocks.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/sort.cuh>

#include <cmath>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda::sort_kernels;
using emu::cpu;

}  // namespace

TEST_CASE("sort_kernel: the CPU's stable order, values and indices") {
  struct Layout {
    int64_t outer, r, inner;
  };
  const Layout layouts[] = {{1, 1, 1}, {3, 31, 1}, {2, 33, 3}, {1, 1025, 1}, {2, 64, 2}};
  for (const Layout& l : layouts)
    for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8, kInt8, kBool})
      for (bool descending : {false, true}) {
        CAPTURE(l.r);
        CAPTURE(l.inner);
        CAPTURE(descending);
        const Shape s{l.outer, l.r, l.inner};
        // few distinct values (ties), and the edge values among the floating ones
        Tensor x =
            is_floating(t) ? emu::with_edges(s, t, -3, 3, uint64_t(l.r)) : emu::ints(s, t, 0, t == kBool ? 2 : 6, 2);
        if (is_floating(t) && l.r > 40) {  // ties: quarters only
          std::vector<double> v = x.to_vector<double>();
          for (double& e : v) e = std::isfinite(e) ? std::round(e * 4) / 4 : e;
          x = tensor(v, s, kFloat64).to(t);
        }
        const Tensor values = empty(s, t), indices = empty(s, kInt64), got_values = empty(s, t),
                     got_indices = empty(s, kInt64);
        cpu(&Backend::sort, x, Out(values), Out(indices), l.outer, l.r, l.inner, descending);
        dispatch(t, [&](auto tag) {
          using T = typename decltype(tag)::type;
          const emu::DeviceTensor dx("x", x), dv = emu::DeviceTensor::output("values", got_values);
          const emu::DeviceTensor di = emu::DeviceTensor::output("indices", got_indices);
          emu::launch<sort_kernel<T>>({dim3(2), dim3(128)}, dx.ptr<T>(), dv.ptr<T>(), di.ptr<int64_t>(), l.outer, l.r,
                                      l.inner, descending);
          dv.download();
          di.download();
        });
        emu::check_equal(got_values, values, "sort values, " + emu::name_of(t));
        emu::check_equal(got_indices, indices, "sort indices, " + emu::name_of(t));
      }
}
