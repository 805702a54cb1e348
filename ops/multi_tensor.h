// Multi-tensor ops: one call updates many tensors (kernels/*/multi_tensor.*: one fused launch per
// batch of tensors on cuda, a loop on the cpu, nothing on meta). lists[k][j] is operand k of tensor
// j. Their scalars are the kernels' update rules (kernels/update_rules.h), so this header stays
// private: the optimizers and the GradScaler call these, and nothing else of theirs runs kernels.
#pragma once
#include <vector>

#include <memgrad/kernels/backend.h>

namespace mg::detail {

using kernels::TensorLists;
// One SGD step: rules::sgd with scalars[j] on tensor j; lists = {params, grads, momentum buffers
// (optional)}. `optimizer` names the caller in errors. The parameters' versions are bumped. The SGD
// and Adam steps also take a float16/bfloat16 gradient for a float32 parameter (its state float32),
// read with scalars[j].grad's factors (mixed precision without float32 copies of the gradients).
void sgd_update_(const char* optimizer, const TensorLists& lists,
                 const std::vector<kernels::rules::SGDScalars>& scalars);
// One Adam(W) step: rules::adam; lists = {params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq (optional)}.
void adam_update_(const char* optimizer, const TensorLists& lists,
                  const std::vector<kernels::rules::AdamScalars>& scalars);
// One Lion step: rules::lion; lists = {params, grads, exp_avg}.
void lion_update_(const TensorLists& lists, const std::vector<kernels::rules::LionScalars>& scalars);
// One 8-bit Adam(W) step (kernels/quantize8bit.h); lists = {params, grads, exp_avg, exp_avg_sq, exp_avg
// absmax, exp_avg_sq absmax}, the state shaped as the kernel list says.
void adam8bit_update_(const char* optimizer, const TensorLists& lists,
                      const std::vector<kernels::quant::Adam8bitScalars>& scalars);
// One Adafactor step (kernels/adafactor.h); lists = {params, grads, row_var, col_var, exp_avg (optional)}.
void adafactor_update_(const TensorLists& lists, const std::vector<kernels::adafactor::Scalars>& scalars);
// Sets found_inf (float32 [1] on their device) to 1 when an element of the contiguous floating
// `tensors` is inf or NaN (never clears it); unless inv_scale == 1, then multiplies them in place
// (as t.mul_(inv_scale), their versions bumped).
void non_finite_check_and_unscale_(const std::vector<Tensor>& tensors, const Tensor& found_inf, double inv_scale);

}  // namespace mg::detail
