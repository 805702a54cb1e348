// kernels::run under a memory budget (core/budget/budget.h): the kernel's tensor arguments go to the
// budget runtime, which brings them back if evicted and records a replay of the call for the
// storages it writes. The replay keeps the function pointer and every non-tensor argument by value
// (random kernels get their seed and Philox offset as arguments, so a replay draws the same
// numbers); tensors are slots the runtime fills with the storages of the time.
#pragma once
#include <algorithm>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <memgrad/core/budget/runtime_impl.h>
#include <memgrad/core/tensor.h>

namespace mg::kernels {

// Which tensors of a call of `kernel` it writes: one entry per Tensor parameter, in order, then one
// per tensor of its list parameters (all written). From the table in kernels/budget_run.cpp.
std::vector<bool> written_tensors(const char* kernel, size_t tensor_params, size_t list_tensors);
// Disagreements between that table and kernel_list.h (a kernel or parameter name in one only):
// empty when they agree; a test checks it.
std::vector<std::string> written_table_errors();

namespace budget_run {

struct Slot {
  size_t index;
};
template <class T>
inline constexpr bool is_list =
    std::is_same_v<T, std::vector<Tensor>> || std::is_same_v<T, std::vector<std::vector<Tensor>>>;

template <class T>
void collect(const T& a, std::vector<Tensor>& tensors, std::vector<Tensor>& lists) {
  if constexpr (std::is_same_v<T, Tensor>)
    tensors.push_back(a);
  else if constexpr (std::is_same_v<T, std::vector<Tensor>>)
    lists.insert(lists.end(), a.begin(), a.end());
  else if constexpr (std::is_same_v<T, std::vector<std::vector<Tensor>>>)
    for (auto& l : a) lists.insert(lists.end(), l.begin(), l.end());
}
template <class T>
auto capture(const T& a, size_t& next) {
  if constexpr (std::is_same_v<T, Tensor>)
    return Slot{next++};
  else
    return a;
}
template <class T>
const auto& restore(const T& a, const std::vector<Tensor>& tensors) {
  if constexpr (std::is_same_v<T, Slot>)
    return tensors[a.index];
  else
    return a;
}

// 2 FLOPs per multiply-add of a matmul (what FlopCounter counts); other kernels count none.
double flops(const char* kernel, const std::vector<Tensor>& t);

}  // namespace budget_run

template <class F, class... Args>
void run_budgeted(const Device& device, const char* kernel, F f, const Args&... args) {
  using namespace budget_run;
  if (!budget::detail::active(device) || budget::detail::t_kernel_depth > 0 ||
      budget::detail::replaying()) {  // not managed, or inside another kernel: that one is the unit
    budget::detail::KernelDepth depth;
    f(args...);
    return;
  }
  std::vector<Tensor> tensors, lists;
  (collect(args, tensors, lists), ...);
  std::vector<bool> written = written_tensors(kernel, tensors.size(), lists.size());
  budget::detail::Replay replay;
  if constexpr (!(is_list<Args> || ...)) {
    size_t next = 0;
    std::tuple<decltype(capture(args, next))...> captured{capture(args, next)...};
    replay = [f, captured](const std::vector<Tensor>& t) {
      std::apply([&](const auto&... a) { f(restore(a, t)...); }, captured);
    };
  }
  const double n_flops = flops(kernel, tensors);
  tensors.insert(tensors.end(), lists.begin(), lists.end());
  budget::detail::KernelRun run(device, kernel, std::move(tensors), std::move(written), std::move(replay), n_flops);
  run.run([&] { f(args...); });
}

}  // namespace mg::kernels
