// Multi-tensor ops (ops/multi_tensor.h): the optimizers' steps and the GradScaler's unscale.
#include <memgrad/ops/multi_tensor.h>
#include <memgrad/ops/op_util.h>

namespace mg::detail {

namespace {

// Checks the operands (an undefined one is an unused optional state) and runs `fn` once per device
// over the tensors on it. They must be contiguous and, unless `shaped_like_param` is false (state
// with shapes of its own, which the optimizer made to its spec), of the parameter's size and dtype;
// with `half_grads` the gradients (operand 1) of float32 parameters may be float16 or bfloat16.
template <class S>
void run_update(Op id, const char* optimizer, void (*kernels::Backend::*fn)(const TensorLists&, const std::vector<S>&),
                const TensorLists& lists, const std::vector<S>& scalars, bool shaped_like_param = true,
                bool half_grads = false) {
  OpScope scope(id);
  std::vector<std::pair<Device, std::vector<size_t>>> by_device;  // in order of first appearance
  for (size_t j = 0; j < scalars.size(); ++j) {
    const Tensor& p = lists[0][j];
    if (!p.is_meta())
      for (size_t k = 0; k < lists.size(); ++k) {
        const Tensor& t = lists[k][j];
        const bool half_grad = half_grads && k == 1 && p.dtype() == kFloat32 && is_half(t.dtype());
        if (t.defined())
          MG_CHECK(t.is_contiguous() &&
                       (!shaped_like_param || (t.numel() == p.numel() && (t.dtype() == p.dtype() || half_grad))),
                   ValueError, optimizer,
                   ": expected contiguous tensors of one size and dtype (or a half gradient of a float32 parameter)");
      }
    auto it = by_device.begin();
    while (it != by_device.end() && it->first != p.device()) ++it;
    if (it == by_device.end()) it = by_device.insert(it, {p.device(), {}});
    it->second.push_back(j);
  }
  for (auto& [device, which] : by_device) {
    if (by_device.size() == 1) {
      kernels::run(device, fn, lists, scalars);
      break;
    }
    TensorLists sub(lists.size());
    std::vector<S> sub_scalars;
    for (size_t j : which) {
      for (size_t k = 0; k < lists.size(); ++k) sub[k].push_back(lists[k][j]);
      sub_scalars.push_back(scalars[j]);
    }
    kernels::run(device, fn, sub, sub_scalars);
  }
  for (const Tensor& p : lists[0]) p.storage()->bump_version();
}

}  // namespace

void sgd_update_(const char* optimizer, const TensorLists& lists,
                 const std::vector<kernels::rules::SGDScalars>& scalars) {
  run_update(Op::sgd_update_, optimizer, &Backend::sgd_update, lists, scalars, true, true);
}

void adam_update_(const char* optimizer, const TensorLists& lists,
                  const std::vector<kernels::rules::AdamScalars>& scalars) {
  run_update(Op::adam_update_, optimizer, &Backend::adam_update, lists, scalars, true, true);
}

void lion_update_(const TensorLists& lists, const std::vector<kernels::rules::LionScalars>& scalars) {
  run_update(Op::lion_update_, "Lion", &Backend::lion_update, lists, scalars);
}

void adam8bit_update_(const char* optimizer, const TensorLists& lists,
                      const std::vector<kernels::quant::Adam8bitScalars>& scalars) {
  run_update(Op::adam8bit_update_, optimizer, &Backend::adam8bit_update, lists, scalars, false);
}

void adafactor_update_(const TensorLists& lists, const std::vector<kernels::adafactor::Scalars>& scalars) {
  run_update(Op::adafactor_update_, "Adafactor", &Backend::adafactor_update, lists, scalars, false);
}

void non_finite_check_and_unscale_(const std::vector<Tensor>& tensors, const Tensor& found_inf, double inv_scale) {
  OpScope scope(Op::non_finite_check_and_unscale_);
  kernels::run(found_inf.device(), &Backend::non_finite_check_and_unscale, tensors, found_inf, inv_scale);
  if (inv_scale != 1.0)
    for (const Tensor& t : tensors) t.storage()->bump_version();
}

}  // namespace mg::detail
