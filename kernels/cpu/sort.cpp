// Sorting along a dim of a contiguous [outer, r, inner] view: a stable sort of each line.
#include <algorithm>
#include <numeric>
#include <vector>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>
#include <memgrad/kernels/scan.h>

namespace mg::cpu::MG_CPU_ISA_NS {

void sort(const Tensor& x, const Out& values, const Out& indices, int64_t outer, int64_t r, int64_t inner,
          bool descending) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = ptr<T>(x);
    T* vp = ptr<T>(values);
    int64_t* ip = ptr<int64_t>(indices);
    for_each_line(outer, r, inner, [&](int64_t, int64_t base, int64_t st) {
      std::vector<int64_t> order(static_cast<size_t>(r));
      std::iota(order.begin(), order.end(), int64_t(0));
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return kernels::sorts_before(load(xp[base + a * st]), load(xp[base + b * st]), descending);
      });
      for (int64_t k = 0; k < r; ++k) {
        vp[base + k * st] = xp[base + order[size_t(k)] * st];
        ip[base + k * st] = order[size_t(k)];
      }
    });
  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
