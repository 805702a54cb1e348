// Custom functions: the user supplies forward and backward (for kernel experiments, or ops
// memgrad lacks). Forward runs with grad mode off; its outputs get a node that calls backward.
//
//   struct Square : mg::autograd::Function<Square> {
//     static TensorList forward(FunctionCtx& ctx, const TensorList& x) {
//       ctx.save_for_backward({x[0]});
//       return {x[0] * x[0]};
//     }
//     static TensorList backward(FunctionCtx& ctx, const TensorList& g) {
//       return {g[0] * 2.0 * ctx.saved()[0]};
//     }
//   };
//   Tensor y = Square::apply({x})[0];
#pragma once
#include <any>
#include <functional>
#include <map>
#include <string>

#include <memgrad/autograd/node.h>

namespace mg::autograd {

class FunctionCtx {
 public:
  // Tensors backward needs; they count as Activation until backward has run.
  void save_for_backward(const TensorList& tensors);
  // The saved tensors; raises if one was modified in place after saving.
  TensorList saved() const;
  // Whether input i needs a gradient (backward may return undefined where not).
  bool needs_input_grad(size_t i) const { return i < needs_.size() && needs_[i]; }
  std::map<std::string, std::any> data;  // any other values backward needs

 private:
  friend TensorList apply_function(const std::string&,
                                   const std::function<TensorList(FunctionCtx&, const TensorList&)>&,
                                   std::function<TensorList(FunctionCtx&, const TensorList&)>, const TensorList&);
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_;
};

using ForwardFn = std::function<TensorList(FunctionCtx&, const TensorList&)>;
using UserBackwardFn = std::function<TensorList(FunctionCtx&, const TensorList& grad_outputs)>;

// Runs `forward` on `inputs` and records `backward`, which returns one gradient per input.
TensorList apply_function(const std::string& name, const ForwardFn& forward, UserBackwardFn backward,
                          const TensorList& inputs);

// CRTP form: Derived provides static forward(ctx, inputs) and backward(ctx, grad_outputs).
template <class Derived>
struct Function {
  static TensorList apply(const TensorList& inputs, const std::string& name = "CustomFunction") {
    return apply_function(name, &Derived::forward, &Derived::backward, inputs);
  }
};

}  // namespace mg::autograd
