// Losses: cross-entropy (fused with its softmax), the negative log-likelihood and mean squared error.
#include <memgrad/core/autocast.h>
#include <memgrad/ops/op_util.h>

namespace mg {

using namespace detail;

namespace {
// Checks of the class-index losses: input [N, C] or [N, C, d...], target int64 [N] or [N, d...],
// weight [C] of the input's dtype (or undefined).
void check_class_loss(const char* op, const char* input_name, const Tensor& input, const Tensor& target,
                      const Tensor& weight) {
  check_floating(op, input);
  check_dtype(op, target, kInt64, "class-index targets");
  check_same_device(op, input, target);
  MG_CHECK(input.dim() >= 2, ShapeError, op, ": expected ", input_name, " [N, C] or [N, C, d...], got ",
           shape_str(input.shape()));
  Shape expect = input.shape();
  expect.erase(expect.begin() + 1);
  MG_CHECK(target.shape() == expect, ShapeError, op, ": expected a target of shape ", shape_str(expect), " for ",
           input_name, " ", shape_str(input.shape()), ", got ", shape_str(target.shape()));
  if (!weight.defined()) return;
  check_same_device(op, input, weight);
  MG_CHECK(weight.shape() == Shape{input.size(1)}, ShapeError, op, ": expected a class weight of shape [",
           input.size(1), "], got ", shape_str(weight.shape()));
  MG_CHECK(weight.dtype() == input.dtype(), DTypeError, op, ": expected a weight of the input's dtype ", input.dtype(),
           ", got ", weight.dtype());
}

// Unbatched input [C] with a 0-d target, as PyTorch allows: one row.
bool unbatched(const Tensor& input, const Tensor& target) { return input.dim() == 1 && target.dim() == 0; }

// The targets that are not ignore_index (bool), and the targets with those replaced by class 0.
std::pair<Tensor, Tensor> valid_targets(const Tensor& target, int64_t ignore_index) {
  NoGradGuard ng;
  MemoryScope scratch(Category::Temporary);
  Tensor valid = ne(target, Scalar(ignore_index));
  return {valid, where(valid, target, zeros({}, TensorOptions(kInt64).device(target.device())))};
}

// -weight[t] * input[n, t, d...], 0 where t is ignore_index: nll_loss without reduction.
Tensor nll_elements(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index) {
  auto [valid, safe] = valid_targets(target, ignore_index);
  Tensor picked = gather(input, 1, safe.unsqueeze(1)).squeeze(1);
  Tensor w;
  {
    NoGradGuard ng;  // PyTorch's class weights get no gradient either
    w = weight.defined() ? index_select(weight, 0, safe.reshape({-1})).view(target.shape()) * valid.to(input.dtype())
                         : valid.to(input.dtype());
  }
  return -(picked * w);
}

// The mean's denominator: the total class weight of the targets that are not ignored.
Tensor weight_of_targets(const Tensor& target, const Tensor& weight, int64_t ignore_index, DType dtype) {
  auto [valid, safe] = valid_targets(target, ignore_index);
  NoGradGuard ng;
  if (!weight.defined()) return valid.sum().to(dtype);
  return (index_select(weight, 0, safe.reshape({-1})) * valid.reshape({-1}).to(weight.dtype())).sum();
}

// PyTorch's cross-entropy of rows [M, C] from differentiable ops: what the fused kernels compute
// (the backward of a backward recomputes it).
Tensor cross_entropy_math(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                          double smoothing) {
  Tensor logp = log_softmax(logits, 1), loss = nll_elements(logp, target, weight, ignore_index);
  if (smoothing == 0) return loss;
  Tensor valid = valid_targets(target, ignore_index).first.to(logits.dtype());
  Tensor smooth = -(weight.defined() ? logp * weight : logp).sum({1}) * valid;
  return loss * (1 - smoothing) + smooth * (smoothing / double(logits.size(1)));
}

// Per-row cross-entropy of logits [M, C] against int64 targets [M], fused with the softmax.
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                          double smoothing) {
  OpScope scope(Op::cross_entropy);
  Tensor out = new_output({logits.size(0)}, logits.dtype(), logits.device());
  kernels::run(logits.device(), &Backend::cross_entropy, logits, target, weight, out, ignore_index, smoothing);
  if (autograd::any_requires_grad({logits})) {
    SavedTensor sl(logits), st(target), sw(weight);
    autograd::record(Op::cross_entropy, {logits}, {out}, [=](const TensorList& g, const Node&) {
      Tensor l = sl.get(), t = st.get(), w = sw.defined() ? sw.get() : Tensor();
      if (autograd::creating_graph())  // recompute from differentiable ops, and differentiate those
        return autograd::differentiate(
            [&](const TensorList& in) { return TensorList{cross_entropy_math(in[0], t, w, ignore_index, smoothing)}; },
            {l}, {g[0]});
      Tensor gi = new_like(l);
      kernels::run(l.device(), &Backend::cross_entropy_backward, g[0].contiguous(), l, t, w, gi, ignore_index,
                   smoothing);
      return TensorList{gi};
    });
  }
  return out;
}

Tensor reduce_loss(const Tensor& per_element, Reduction r) {
  if (r == Reduction::Sum) return per_element.sum();
  if (r == Reduction::Mean) return per_element.mean();
  return per_element;
}
}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target_in, const Tensor& weight_in, Reduction reduction,
                     int64_t ignore_index, double smoothing) {
  if (unbatched(logits_in, target_in))
    return cross_entropy(logits_in.unsqueeze(0), target_in.unsqueeze(0), weight_in, reduction, ignore_index, smoothing)
        .squeeze(0);
  Tensor logits = amp::cast_for_float_op(logits_in), weight = amp::cast_for_float_op(weight_in);
  const Tensor& target = target_in;
  check_class_loss("cross_entropy", "logits", logits, target, weight);
  MG_CHECK(smoothing >= 0 && smoothing <= 1, ValueError, "cross_entropy: expected label_smoothing in [0, 1], got ",
           smoothing);
  Tensor rows = logits;
  if (logits.dim() > 2) {  // [N, C, d...] -> [N * d..., C]
    std::vector<int64_t> perm{0};
    for (int64_t d = 2; d < logits.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    rows = logits.permute(perm);
  }
  Tensor flat_target, w;
  {
    NoGradGuard ng;
    flat_target = target.contiguous().reshape({-1});
    if (weight.defined()) w = weight.contiguous();
  }
  Tensor losses =
      cross_entropy_rows(rows.reshape({-1, logits.size(1)}).contiguous(), flat_target, w, ignore_index, smoothing);
  if (reduction == Reduction::None) return losses.view(target.shape());
  if (reduction == Reduction::Sum) return losses.sum();
  // The mean over the targets that are not ignored, each counted with its class weight.
  return losses.sum() / weight_of_targets(flat_target, w, ignore_index, logits.dtype());
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double smoothing,
                     Reduction reduction) {
  return cross_entropy(logits, target, Tensor(), reduction, ignore_index, smoothing);
}

Tensor nll_loss(const Tensor& input_in, const Tensor& target, const Tensor& weight_in, Reduction reduction,
                int64_t ignore_index) {
  if (unbatched(input_in, target))
    return nll_loss(input_in.unsqueeze(0), target.unsqueeze(0), weight_in, reduction, ignore_index).squeeze(0);
  Tensor input = amp::cast_for_float_op(input_in), weight = amp::cast_for_float_op(weight_in);
  check_class_loss("nll_loss", "input", input, target, weight);
  OpScope scope(Op::nll_loss);
  Tensor losses;
  try {
    losses = nll_elements(input, target, weight, ignore_index);
  } catch (const IndexError& e) {  // name the op the user called, and its ignore_index
    throw IndexError(detail::str("nll_loss: expected target values in [0, ", input.size(1), ") or ignore_index ",
                                 ignore_index, "; ", e.what()));
  }
  if (reduction == Reduction::None) return losses;
  if (reduction == Reduction::Sum) return losses.sum();
  return losses.sum() / weight_of_targets(target, weight, ignore_index, input.dtype());
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  Tensor input = amp::cast_for_float_op(input_in), target = amp::cast_for_float_op(target_in);
  MG_CHECK(input.shape() == target.shape(), ShapeError, "mse_loss: expected input and target of one shape, got ",
           shape_str(input.shape()), " and ", shape_str(target.shape()));
  Tensor d = input - target;
  return reduce_loss(d * d, reduction);
}

}  // namespace mg
