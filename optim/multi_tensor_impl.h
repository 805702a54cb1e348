// Runs an optimizer's multi-tensor Backend entry over one parameter group (private to optim/).
#pragma once
#include <utility>
#include <vector>

#include <memgrad/kernels/backend.h>

namespace mg::optim::detail {

// Checks the operands (lists[k][j]: operand k of parameter j; an undefined one is an unused
// optional state) and runs `fn` once per device over the parameters on it: one fused launch per
// batch on CUDA, one loop per parameter on the CPU, nothing on meta. The operands must be contiguous
// and, unless `shaped_like_param` is false (state with shapes of its own, which the caller made to
// its spec), of the parameter's size and dtype.
template <class S>
void run_update(const char* op, void (*kernels::Backend::*fn)(const kernels::TensorLists&, const std::vector<S>&),
                const kernels::TensorLists& lists, const std::vector<S>& scalars, bool shaped_like_param = true) {
  std::vector<std::pair<Device, std::vector<size_t>>> by_device;  // in order of first appearance
  for (size_t j = 0; j < scalars.size(); ++j) {
    const Tensor& p = lists[0][j];
    if (!p.is_meta())
      for (auto& list : lists)
        if (list[j].defined())
          MG_CHECK(list[j].is_contiguous() &&
                       (!shaped_like_param || (list[j].numel() == p.numel() && list[j].dtype() == p.dtype())),
                   ValueError, op, ": expected contiguous tensors of one size and dtype");
    auto it = by_device.begin();
    while (it != by_device.end() && it->first != p.device()) ++it;
    if (it == by_device.end()) it = by_device.insert(it, {p.device(), {}});
    it->second.push_back(j);
  }
  for (auto& [device, which] : by_device) {
    if (by_device.size() == 1) return kernels::run(device, fn, lists, scalars);
    kernels::TensorLists sub(lists.size());
    std::vector<S> sub_scalars;
    for (size_t j : which) {
      for (size_t k = 0; k < lists.size(); ++k) sub[k].push_back(lists[k][j]);
      sub_scalars.push_back(scalars[j]);
    }
    kernels::run(device, fn, sub, sub_scalars);
  }
}

}  // namespace mg::optim::detail
