#include <memgrad/autograd/function.h>
#include <memgrad/core/grad_mode.h>

namespace mg::autograd {

void FunctionCtx::save_for_backward(const TensorList& tensors) {
  saved_.clear();
  for (auto& t : tensors) saved_.emplace_back(t);
}

TensorList FunctionCtx::saved() const {
  TensorList r;
  for (auto& s : saved_) r.push_back(s.defined() ? s.get() : Tensor());
  return r;
}

TensorList apply_function(const std::string& name, const ForwardFn& forward, UserBackwardFn backward,
                          const TensorList& inputs) {
  auto ctx = std::make_shared<FunctionCtx>();
  for (auto& t : inputs) ctx->needs_.push_back(t.defined() && t.requires_grad() && GradMode::is_enabled());
  TensorList outputs;
  {
    NoGradGuard ng;
    outputs = forward(*ctx, inputs);
  }
  for (auto& o : outputs)  // an input returned as-is becomes an alias, so it can take a grad_fn
    for (auto& i : inputs)
      if (o.defined() && o.is_same(i)) o = i.detach();
  size_t n_inputs = inputs.size();
  record(
      Op::custom, inputs, outputs,
      [ctx, backward, n_inputs, name](const TensorList& g, const Node&) {
        TensorList grads = backward(*ctx, g);
        MG_CHECK(grads.size() == n_inputs, AutogradError, name, ": backward returned ", grads.size(),
                 " gradients, expected one per input (", n_inputs, ")");
        return grads;
      },
      name);
  return outputs;
}

}  // namespace mg::autograd
