// The CPU loop that applies an optimizer update rule element by element (private to optim/).
#pragma once
#include <array>
#include <vector>

#include <memgrad/kernels/cpu/loops.h>

namespace mg::optim::detail {

// Calls f(ptrs, i) for every element i, where ptrs[k] points at tensor k's storage type
// (all tensors share dtype, device and size and are contiguous; undefined ones give null).
// Meta tensors have no values: nothing runs.
template <class F>
void for_each_element(const char* op, const std::vector<Tensor>& ts, F&& f) {
  const Tensor& first = ts.front();
  if (first.is_meta()) return;
  MG_CHECK(first.device().is_cpu(), NotImplementedError, op, ": no update kernel for device ", first.device(), " yet");
  for (auto& t : ts)
    if (t.defined())
      MG_CHECK(t.is_contiguous() && t.numel() == first.numel() && t.dtype() == first.dtype(), ValueError, op,
               ": expected contiguous tensors of one size and dtype");
  cpu::dispatch_floating(first.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::array<T*, 5> p{};
    for (size_t k = 0; k < ts.size() && k < p.size(); ++k) p[k] = ts[k].defined() ? cpu::ptr<T>(ts[k]) : nullptr;
    const int64_t n = first.numel();
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) f(p, i);
  });
}

}  // namespace mg::optim::detail
