// A kernel call under a memory budget (budget.h), as kernels::run hands it over: the call's tensor
// arguments go to the budget runtime, which brings them back if evicted and records a replay of the
// call for the storages it writes. The replay keeps the function pointer and every non-tensor
// argument by value (random kernels get their seed and Philox offset as arguments, so a replay draws
// the same numbers); tensors are slots the runtime fills with the storages of the time. Which
// arguments the kernel writes, and its FLOPs, are the kernel list's facts (kernels/kernel_list.h).
#pragma once
#include <array>
#include <tuple>
#include <type_traits>
#include <vector>

#include <memgrad/core/budget/runtime_impl.h>
#include <memgrad/core/tensor.h>

namespace mg::budget::detail {

namespace call {

struct Slot {
  size_t index;
};
template <class T>
inline constexpr bool is_tensor = std::is_base_of_v<Tensor, T>;
template <class T>
inline constexpr bool is_list =
    std::is_same_v<T, std::vector<Tensor>> || std::is_same_v<T, std::vector<std::vector<Tensor>>>;

// Argument `a`: a tensor (written or read, as its parameter says) or a list of tensors (all written).
template <class T>
void collect(const T& a, bool written_param, std::vector<Tensor>& tensors, std::vector<bool>& written,
             std::vector<Tensor>& lists) {
  if constexpr (is_tensor<T>) {
    tensors.push_back(a);
    written.push_back(written_param);
  } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
    lists.insert(lists.end(), a.begin(), a.end());
  } else if constexpr (std::is_same_v<T, std::vector<std::vector<Tensor>>>) {
    for (auto& l : a) lists.insert(lists.end(), l.begin(), l.end());
  }
}
template <class T>
auto capture(const T& a, size_t& next) {
  if constexpr (is_tensor<T>)
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

}  // namespace call

// Runs kernel `f` on `device` under its budget: written_params[i] says whether parameter i is one the
// kernel writes; `flops` prices a replay. Inside another kernel (or a replay) it just runs: the outer
// call is the unit the runtime records.
template <class F, size_t N, class... Args>
void run_kernel(const Device& device, const char* kernel, F f, const std::array<bool, N>& written_params, double flops,
                const Args&... args) {
  static_assert(N == sizeof...(Args), "run_kernel: one argument per kernel parameter");
  using namespace call;
  if (!active(device) || t_kernel_depth > 0 || replaying()) {
    KernelDepth depth;
    f(args...);
    return;
  }
  std::vector<Tensor> tensors, lists;
  std::vector<bool> written;
  size_t i = 0;
  (collect(args, written_params[i++], tensors, written, lists), ...);
  Replay replay;
  if constexpr (!(is_list<Args> || ...)) {
    size_t next = 0;
    std::tuple<decltype(capture(args, next))...> captured{capture(args, next)...};
    replay = [f, captured](const std::vector<Tensor>& t) {
      std::apply([&](const auto&... a) { f(restore(a, t)...); }, captured);
    };
  }
  written.insert(written.end(), lists.size(), true);
  tensors.insert(tensors.end(), lists.begin(), lists.end());
  KernelRun run(device, kernel, std::move(tensors), std::move(written), std::move(replay), flops);
  run.run([&] { f(args...); });
}

}  // namespace mg::budget::detail
