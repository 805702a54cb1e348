// Neural-network ops: layer and batch norm, dropout, losses, convolution and pooling.
#include <memgrad/core/autocast.h>
#include <memgrad/core/cuda.h>
#include <memgrad/core/flops.h>
#include <memgrad/core/ops/op_util.h>
#include <memgrad/core/random.h>

namespace mg {

using namespace detail;
using kernels::Conv2dGeometry;

namespace {

// layer_norm's checks; the weight and bias made contiguous (undefined when not given) and the
// [rows, n] the kernels see.
struct LayerNormArgs {
  Tensor w, b;
  int64_t rows, n;
};
LayerNormArgs layer_norm_args(const char* op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                              const Tensor& bias) {
  check_floating(op, x);
  size_t k = normalized_shape.size();
  MG_CHECK(k >= 1 && size_t(x.dim()) >= k && Shape(x.shape().end() - int64_t(k), x.shape().end()) == normalized_shape,
           ShapeError, op, ": expected an input ending in ", shape_str(normalized_shape), ", got ",
           shape_str(x.shape()));
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) {
      MG_CHECK(p->shape() == normalized_shape, ShapeError, op, ": expected weight and bias of shape ",
               shape_str(normalized_shape), ", got ", shape_str(p->shape()));
      MG_CHECK(p->dtype() == x.dtype(), DTypeError, op, ": expected weight and bias of dtype ", x.dtype(), ", got ",
               p->dtype());
      check_same_device(op, x, *p);
    }
  LayerNormArgs a;
  a.n = numel_of(normalized_shape);
  a.rows = x.numel() / std::max<int64_t>(a.n, 1);
  NoGradGuard ng;
  if (weight.defined()) a.w = weight.contiguous();
  if (bias.defined()) a.b = bias.contiguous();
  return a;
}

// Mean and rstd [rows]: float32, float64 for float64 inputs.
std::pair<Tensor, Tensor> layer_norm_stats(const Tensor& x, int64_t rows) {
  const DType stat = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  return {new_output({rows}, stat, x.device()), new_output({rows}, stat, x.device())};
}

// Records the backward of layer_norm (first = 0: inputs x, weight, bias; output y) or add_layer_norm
// (first = 1: inputs x, residual, weight, bias; outputs sum, y). `sx` is the normalized input (x, or
// the sum); the input gradient goes to every input before weight, with the sum's own gradient added.
void record_layer_norm(Op op, const TensorList& inputs, const TensorList& outputs, SavedTensor sx, const Tensor& mean,
                       const Tensor& rstd, SavedTensor sw, const Shape& ns, double eps, size_t first) {
  SavedTensor sm(mean), sr(rstd);
  const int64_t n = numel_of(ns);
  autograd::record(op, inputs, outputs, [=](const TensorList& g, const Node& node) {
    const Tensor xs = sx.get(), w = sw.defined() ? sw.get() : Tensor(), &gy = g[first];
    const int64_t rows = xs.numel() / std::max<int64_t>(n, 1);
    bool need_x = false;
    for (size_t i = 0; i <= first; ++i) need_x = need_x || node.needs_input_grad(i);
    const bool need_w = node.needs_input_grad(first + 1), need_b = node.needs_input_grad(first + 2);
    Tensor gx, gw, gb;
    if (!gy.defined()) {  // only the sum was used
      gx = g[0];
    } else if (autograd::creating_graph()) {  // recompute from differentiable ops, and differentiate those
      auto composed = [&](const TensorList& in) {
        Tensor x2 = in[0].reshape({rows, n}), centered = x2 - x2.mean({1}, true);
        Tensor y = (centered * rsqrt((centered * centered).mean({1}, true) + eps)).view(xs.shape());
        return TensorList{in[1].defined() ? y * in[1] : y};
      };
      TensorList r = autograd::differentiate(composed, {xs, w}, {gy});
      gx = r[0], gw = r[1];
      if (need_b) gb = gy.reshape({rows, n}).sum({0}).view(ns);
      if (first == 1 && g[0].defined()) gx = gx + g[0];
    } else {
      gx = need_x ? new_like(xs) : Tensor();
      gw = need_w ? new_output(ns, xs.dtype(), xs.device()) : Tensor();
      gb = need_b ? new_output(ns, xs.dtype(), xs.device()) : Tensor();
      kernels::run(xs.device(), &Backend::layer_norm_backward, gy.contiguous().view({rows, n}), xs.view({rows, n}),
                   sm.get(), sr.get(), w, gx, gw, gb);
      if (first == 1 && need_x && g[0].defined())  // the sum's own gradient, added in place
        kernels::run(xs.device(), &Backend::binary, kernels::BinaryOp::Add, gx, prepare(g[0], gx.dtype(), gx.shape()),
                     gx, 1.0);
    }
    TensorList grads(first + 3);
    for (size_t i = 0; i <= first; ++i) grads[i] = node.needs_input_grad(i) ? gx : Tensor();
    grads[first + 1] = need_w ? gw : Tensor();
    grads[first + 2] = need_b ? gb : Tensor();
    return grads;
  });
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  Tensor x = amp::cast_for_float_op(x_in), weight = amp::cast_for_float_op(weight_in),
         bias = amp::cast_for_float_op(bias_in);
  OpScope scope(Op::layer_norm);
  LayerNormArgs a = layer_norm_args("layer_norm", x, normalized_shape, weight, bias);
  Tensor xc;
  {
    NoGradGuard ng;
    xc = x.contiguous();
  }
  Tensor out = new_like(xc);
  auto [mean, rstd] = layer_norm_stats(x, a.rows);
  kernels::run(x.device(), &Backend::layer_norm, xc.view({a.rows, a.n}), a.w, a.b, out, mean, rstd, eps);
  if (autograd::any_requires_grad({x, weight, bias}))
    record_layer_norm(Op::layer_norm, {x, weight, bias}, {out}, SavedTensor(xc, x), mean, rstd,
                      SavedTensor(a.w, weight), normalized_shape, eps, 0);
  return out;
}

std::tuple<Tensor, Tensor> add_layer_norm(const Tensor& x_in, const Tensor& residual_in, const Shape& normalized_shape,
                                          const Tensor& weight_in, const Tensor& bias_in, double eps) {
  Tensor x = amp::cast_for_float_op(x_in), residual = amp::cast_for_float_op(residual_in),
         weight = amp::cast_for_float_op(weight_in), bias = amp::cast_for_float_op(bias_in);
  OpScope scope(Op::add_layer_norm);
  check_same_device("add_layer_norm", x, residual);
  MG_CHECK(residual.shape() == x.shape(), ShapeError, "add_layer_norm: expected a residual of the input's shape ",
           shape_str(x.shape()), ", got ", shape_str(residual.shape()));
  MG_CHECK(residual.dtype() == x.dtype(), DTypeError, "add_layer_norm: expected a residual of the input's dtype ",
           x.dtype(), ", got ", residual.dtype());
  LayerNormArgs a = layer_norm_args("add_layer_norm", x, normalized_shape, weight, bias);
  Tensor xc, rc;
  {
    NoGradGuard ng;
    xc = x.contiguous();
    rc = residual.contiguous();
  }
  Tensor sum = new_like(xc), out = new_like(xc);
  auto [mean, rstd] = layer_norm_stats(x, a.rows);
  const Shape rows_n{a.rows, a.n};
  kernels::run(x.device(), &Backend::add_layer_norm, xc.view(rows_n), rc.view(rows_n), a.w, a.b, sum.view(rows_n), out,
               mean, rstd, eps);
  if (autograd::any_requires_grad({x, residual, weight, bias}))
    record_layer_norm(Op::add_layer_norm, {x, residual, weight, bias}, {sum, out}, SavedTensor(sum), mean, rstd,
                      SavedTensor(a.w, weight), normalized_shape, eps, 1);
  return {sum, out};
}

Tensor group_norm(const Tensor& input_in, int64_t num_groups, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  Tensor x = amp::cast_for_float_op(input_in), weight = amp::cast_for_float_op(weight_in),
         bias = amp::cast_for_float_op(bias_in);
  OpScope scope(Op::group_norm);
  check_floating("group_norm", x);
  MG_CHECK(x.dim() >= 2, ShapeError, "group_norm: expected input [N, C, ...], got ", shape_str(x.shape()));
  const int64_t N = x.size(0), C = x.size(1);
  MG_CHECK(num_groups > 0 && C % num_groups == 0, ValueError, "group_norm: expected ", C,
           " channels divisible by a positive num_groups, got ", num_groups);
  Shape per_channel(size_t(x.dim()), 1);  // weight and bias broadcast over N and the positions
  per_channel[1] = C;
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      MG_CHECK(p->shape() == Shape{C}, ShapeError, "group_norm: expected weight and bias of shape [", C, "], got ",
               shape_str(p->shape()));
  // Each group is a row of layer_norm's kernel: [N, G, C / G * positions], normalised without affine.
  const int64_t group_size = C / num_groups * (numel_of(x.shape()) / std::max<int64_t>(N * C, 1));
  Tensor y = layer_norm(x.reshape({N, num_groups, group_size}), {group_size}, Tensor(), Tensor(), eps).view(x.shape());
  if (weight.defined()) y = y * weight.view(per_channel);
  if (bias.defined()) y = y + bias.view(per_channel);
  return y;
}

// Batch normalization: per-channel statistics of the batch (or the running ones), the running
// statistics' update, and the backward.
Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps) {
  Tensor x = amp::cast_for_float_op(x_in), weight = amp::cast_for_float_op(weight_in),
         bias = amp::cast_for_float_op(bias_in);
  OpScope scope(Op::batch_norm);
  check_floating("batch_norm", x);
  MG_CHECK(x.dim() >= 2, ShapeError, "batch_norm: expected an input [N, C, ...], got ", shape_str(x.shape()));
  MG_CHECK(eps > 0, ValueError, "batch_norm: expected a positive eps, got ", eps);
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  for (const Tensor* p : std::initializer_list<const Tensor*>{&weight, &bias, &running_mean, &running_var})
    if (p->defined()) {
      MG_CHECK(p->shape() == Shape{C}, ShapeError,
               "batch_norm: expected weight, bias and running statistics of shape [", C, "], got ",
               shape_str(p->shape()));
      check_same_device("batch_norm", x, *p);
      check_floating("batch_norm", *p);
    }
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      MG_CHECK(p->dtype() == x.dtype(), DTypeError, "batch_norm: expected weight and bias of dtype ", x.dtype(),
               ", got ", p->dtype());
  MG_CHECK(running_mean.defined() == running_var.defined(), ValueError,
           "batch_norm: expected both running statistics or neither, got ",
           running_mean.defined() ? "a running mean only" : "a running variance only");
  MG_CHECK(training || running_mean.defined(), ValueError,
           "batch_norm: expected running statistics to normalize with outside training, got none");
  MG_CHECK(!training || N * S > 1, ValueError,
           "batch_norm: expected more than one value per channel in training, got an input of shape ",
           shape_str(x.shape()));
  const DType stat = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor xc, wc, bc, mean, var;
  {
    NoGradGuard ng;
    xc = x.contiguous();
    if (weight.defined()) wc = weight.contiguous();
    if (bias.defined()) bc = bias.contiguous();
    if (!training) mean = running_mean.to(stat).contiguous(), var = running_var.to(stat).contiguous();
  }
  if (training) mean = new_output({C}, stat, x.device()), var = new_output({C}, stat, x.device());
  Tensor out = new_like(xc), rstd = new_output({C}, stat, x.device());
  kernels::run(x.device(), &Backend::batch_norm, xc.view({N, C, S}), wc, bc, out.view({N, C, S}), mean, var, rstd,
               training, eps);
  if (training && running_mean.defined()) {
    NoGradGuard ng;
    const double unbiased = double(N * S) / double(N * S - 1);
    Tensor rm = running_mean, rv = running_var;  // handles: the buffers are updated in place
    rm.copy_(rm * (1 - momentum) + mean.to(rm.dtype()) * momentum);
    rv.copy_(rv * (1 - momentum) + var.to(rv.dtype()) * (momentum * unbiased));
  }
  if (autograd::any_requires_grad({x, weight, bias})) {
    SavedTensor sx(xc), sm(mean), sr(rstd), sw(wc);
    const Shape shape = xc.shape();
    autograd::record(Op::batch_norm, {x, weight, bias}, {out}, [=](const TensorList& g, const Node& node) {
      Tensor xs = sx.get(), w = sw.defined() ? sw.get() : Tensor();
      Tensor gx = node.needs_input_grad(0) ? new_like(xs) : Tensor();
      Tensor gw = node.needs_input_grad(1) ? new_output({C}, xs.dtype(), xs.device()) : Tensor();
      Tensor gb = node.needs_input_grad(2) ? new_output({C}, xs.dtype(), xs.device()) : Tensor();
      kernels::run(xs.device(), &Backend::batch_norm_backward, g[0].contiguous().view({N, C, S}), xs.view({N, C, S}),
                   sm.get(), sr.get(), w, gx.defined() ? gx.view({N, C, S}) : gx, gw, gb, training);
      return TensorList{gx, gw, gb};
    });
  }
  return out;
}

Tensor detail::dropout_with(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  Tensor xc;
  {
    NoGradGuard ng;
    xc = x.contiguous();
  }
  Tensor out = new_like(xc);
  kernels::run(x.device(), &Backend::dropout, xc, out, p, seed, offset);
  autograd::record(Op::dropout, {x}, {out}, [=](const TensorList& g, const Node&) {
    return TensorList{dropout_with(g[0], p, seed, offset)};  // the same counters give the same mask
  });
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  MG_CHECK(p >= 0 && p <= 1, ValueError, "dropout: expected a probability in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  OpScope scope(Op::dropout);
  check_floating("dropout", x);
  auto [seed, offset] = generator_or_default(generator).draw(uint64_t(x.numel()));
  return dropout_with(x, p, seed, offset);
}

Tensor bias_dropout_add(const Tensor& x_in, const Tensor& bias_in, const Tensor& residual_in, double p, bool training,
                        Generator* generator) {
  MG_CHECK(p >= 0 && p <= 1, ValueError, "bias_dropout_add: expected a probability in [0, 1], got ", p);
  Tensor x = amp::cast_for_float_op(x_in), bias = amp::cast_for_float_op(bias_in),
         residual = amp::cast_for_float_op(residual_in);
  OpScope scope(Op::bias_dropout_add);
  check_floating("bias_dropout_add", x);
  for (const Tensor* t : {&bias, &residual}) {
    check_same_device("bias_dropout_add", x, *t);
    MG_CHECK(t->dtype() == x.dtype(), DTypeError, "bias_dropout_add: expected bias and residual of the input's dtype ",
             x.dtype(), ", got ", t->dtype());
  }
  MG_CHECK(x.dim() >= 1 && bias.shape() == Shape{x.size(-1)}, ShapeError,
           "bias_dropout_add: expected a bias of shape [", x.dim() ? x.size(-1) : 0, "] for input ",
           shape_str(x.shape()), ", got ", shape_str(bias.shape()));
  MG_CHECK(residual.shape() == x.shape(), ShapeError, "bias_dropout_add: expected a residual of the input's shape ",
           shape_str(x.shape()), ", got ", shape_str(residual.shape()));
  if (!training) p = 0;
  uint64_t seed = 0, offset = 0;
  if (p > 0 && p < 1) {  // the draw dropout(x + bias) makes
    auto d = generator_or_default(generator).draw(uint64_t(x.numel()));
    seed = d.seed, offset = d.offset;
  }
  Tensor xc, bc, rc;
  {
    NoGradGuard ng;
    xc = x.contiguous(), bc = bias.contiguous(), rc = residual.contiguous();
  }
  Tensor out = new_like(xc);
  kernels::run(x.device(), &Backend::bias_dropout_add, xc, bc, rc, out, p, seed, offset);
  const Shape bias_shape = bias.shape();
  const DType bias_dtype = bias.dtype();
  autograd::record(Op::bias_dropout_add, {x, bias, residual}, {out}, [=](const TensorList& g, const Node& node) {
    // dropout's backward (its mask from the same counters), then the bias add's and the residual's
    Tensor gx = p == 0 ? g[0] : p == 1 ? g[0] * 0.0 : dropout_with(g[0], p, seed, offset);
    return TensorList{node.needs_input_grad(0) ? gx : Tensor(),
                      node.needs_input_grad(1) ? grad_for(gx, bias_shape, bias_dtype) : Tensor(),
                      node.needs_input_grad(2) ? g[0] : Tensor()};
  });
  return out;
}

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

// ---- convolution and pooling

namespace {
std::vector<int64_t> pair_arg(const char* op, const char* what, std::vector<int64_t> v, int64_t min) {
  if (v.size() == 1) v.push_back(v[0]);
  MG_CHECK(v.size() == 2, ValueError, op, ": expected ", what, " as one or two numbers, got ", v.size());
  for (auto e : v) MG_CHECK(e >= min, ValueError, op, ": expected ", what, " >= ", min, ", got ", e);
  return v;
}

// im2col as an op: x [N, C, H, W] -> columns [N, G, C/G * kh * kw, oh * ow], booked as Workspace.
// It and fold2d (col2im into zeros) are each other's backward, so the lowered convolution's
// backward can be differentiated again.
Tensor fold2d(const Tensor& col, const Shape& x_shape, const Conv2dGeometry& g);
Tensor unfold2d(const Tensor& x, const Conv2dGeometry& g, int64_t groups) {
  Tensor col;
  {
    MemoryScope scratch(Category::Workspace);
    col = new_output({g.n, groups, g.c / groups * g.kh * g.kw, g.oh * g.ow}, x.dtype(), x.device());
    NoGradGuard ng;
    kernels::run(x.device(), &Backend::im2col, x.contiguous(), col, g);
  }
  Shape xs = x.shape();
  autograd::record(Op::conv2d, {x}, {col},
                   [xs, g](const TensorList& grads, const Node&) { return TensorList{fold2d(grads[0], xs, g)}; });
  return col;
}
Tensor fold2d(const Tensor& col, const Shape& x_shape, const Conv2dGeometry& g) {
  Tensor x = zeros_output(x_shape, col.dtype(), col.device());
  kernels::run(col.device(), &Backend::col2im, col.contiguous(), x, g);
  const int64_t groups = col.size(1);
  autograd::record(Op::conv2d, {col}, {x}, [g, groups](const TensorList& grads, const Node&) {
    return TensorList{unfold2d(grads[0], g, groups)};
  });
  return x;
}

Conv2dGeometry geometry(const char* op, const Tensor& x, int64_t kh, int64_t kw, const std::vector<int64_t>& st,
                        const std::vector<int64_t>& pad, const std::vector<int64_t>& dil) {
  MG_CHECK(x.dim() == 4, ShapeError, op, ": expected input [N, C, H, W], got ", shape_str(x.shape()));
  Conv2dGeometry g{x.size(0), x.size(1), x.size(2), x.size(3), kh,     kw,     0,
                   0,         st[0],     st[1],     pad[0],    pad[1], dil[0], dil[1]};
  // Output size (in + 2 pad - dil (k - 1) - 1) / stride + 1, checked: the padded input and the
  // dilated window may overflow, and a window wider than the padded input gives no output.
  auto out_size = [&](int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride) -> int64_t {
    auto padded = checked_mul(2, pad), window = checked_mul(dil, k - 1);
    if (padded) padded = checked_add(in, *padded);
    MG_CHECK(padded && window, ShapeError, op, ": input ", shape_str(x.shape()), " with padding ", pad, ", dilation ",
             dil, " and a ", k, "-wide window overflows int64");
    const int64_t span = *padded - *window - 1;
    return span < 0 ? 0 : span / stride + 1;
  };
  g.oh = out_size(g.h, g.ph, g.dh, kh, g.sh);
  g.ow = out_size(g.w, g.pw, g.dw, kw, g.sw);
  MG_CHECK(g.oh > 0 && g.ow > 0, ShapeError, op, ": input ", shape_str(x.shape()), " is too small for a ", kh, "x", kw,
           " window (output would be ", g.oh, "x", g.ow, ")");
  return g;
}
}  // namespace

Tensor conv2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  Tensor input = amp::cast_for_half_op(input_in), weight = amp::cast_for_half_op(weight_in),
         bias = amp::cast_for_half_op(bias_in);
  OpScope scope(Op::conv2d);
  check_floating("conv2d", input);
  check_same_device("conv2d", input, weight);
  MG_CHECK(input.dtype() == weight.dtype(), DTypeError, "conv2d: expected input and weight of one dtype, got ",
           input.dtype(), " and ", weight.dtype());
  MG_CHECK(weight.dim() == 4, ShapeError, "conv2d: expected weight [O, C/groups, kH, kW], got ",
           shape_str(weight.shape()));
  MG_CHECK(groups >= 1, ValueError, "conv2d: expected groups >= 1, got ", groups);
  stride = pair_arg("conv2d", "stride", stride, 1);
  padding = pair_arg("conv2d", "padding", padding, 0);
  dilation = pair_arg("conv2d", "dilation", dilation, 1);
  auto g = geometry("conv2d", input, weight.size(2), weight.size(3), stride, padding, dilation);
  const int64_t O = weight.size(0), G = groups;
  MG_CHECK(g.c % G == 0 && O % G == 0, ValueError, "conv2d: expected channels ", g.c, " and outputs ", O,
           " divisible by groups ", G);
  MG_CHECK(weight.size(1) * G == g.c, ShapeError, "conv2d: expected weight with ", g.c / G,
           " input channels per group for input ", shape_str(input.shape()), ", got ", shape_str(weight.shape()));
  if (bias.defined())
    MG_CHECK(bias.shape() == Shape{O}, ShapeError, "conv2d: expected a bias of shape [", O, "], got ",
             shape_str(bias.shape()));
  const int64_t K = numel_of({g.c / G, g.kh, g.kw}), L = numel_of({g.oh, g.ow});  // im2col's [K, L] per group
  const double flops = 2.0 * double(g.n) * double(O) * double(K) * double(L);
  Tensor out = new_output({g.n, O, g.oh, g.ow}, input.dtype(), input.device());
  // A direct convolution (cuDNN) is tried first on cuda unless the kernel variant is "im2col"; it
  // may decline (dtype, size), and cpu and meta never ask, so their ledger is exactly the lowering's.
  const bool direct = input.device().is_cuda() && cuda::kernel_variant("conv2d") == "cudnn";
  // Lower to GEMM: out[n, grp] = W[grp] @ im2col(x)[n, grp]; the columns are scratch.
  auto columns = [g, G](const Tensor& x) { return unfold2d(x, g, G); };
  {
    NoGradGuard ng;
    bool done = false;
    if (direct) {
      MemoryScope scratch(Category::Workspace);  // contiguous copies, if any, are scratch like the columns
      done = kernels::try_run(input.device(), &Backend::conv2d, input.contiguous(), weight.contiguous(), out, g, G);
    }
    if (!done) {
      Tensor col = columns(input);
      Tensor w = weight.contiguous().view({G, O / G, K});
      for (int64_t n = 0; n < g.n; ++n)
        kernels::run(input.device(), &Backend::matmul, w, col.select(0, n), out.select(0, n).view({G, O / G, L}));
    }
    if (bias.defined()) {
      Tensor o3 = out.view({g.n, O, L});
      kernels::run(input.device(), &Backend::binary, kernels::BinaryOp::Add, o3,
                   prepare(bias.view({O, 1}), input.dtype(), o3.shape()), o3, 1.0);
    }
  }
  count_flops(flops);
  if (autograd::any_requires_grad({input, weight, bias})) {
    SavedTensor sx(weight.requires_grad() ? input : Tensor()), sw(input.requires_grad() ? weight : Tensor());
    Shape xs = input.shape(), ws = weight.shape();
    autograd::record(Op::conv2d, {input, weight, bias}, {out}, [=](const TensorList& grads, const Node& node) {
      Tensor go = grads[0].contiguous().view({g.n, G, O / G, L}), gx, gw, gb;
      // The direct kernels write whole gradients (allocated first, dropped before the lowering
      // runs if declined) and count the FLOPs the lowering's matmuls would.
      auto direct_grad = [&](auto entry, const Shape& shape, const Tensor& operand) {
        if (!direct || autograd::creating_graph()) return Tensor();  // the lowering is differentiable
        Tensor grad = new_output(shape, go.dtype(), go.device());
        MemoryScope scratch(Category::Workspace);
        if (!kernels::try_run(go.device(), entry, go.view({g.n, O, g.oh, g.ow}), operand.contiguous(), grad, g, G))
          return Tensor();
        count_flops(flops);
        return grad;
      };
      if (node.needs_input_grad(0)) gx = direct_grad(&Backend::conv2d_backward_input, xs, sw.get());
      if (node.needs_input_grad(0) && !gx.defined()) {
        Tensor w = sw.get().reshape({G, O / G, K});
        gx = fold2d(matmul(w.transpose(1, 2), go), xs, g);  // the columns' gradient [N, G, K, L], folded
      }
      if (node.needs_input_grad(1)) gw = direct_grad(&Backend::conv2d_backward_weight, ws, sx.get());
      if (node.needs_input_grad(1) && !gw.defined()) {
        Tensor col = columns(sx.get());
        gw = sum(matmul(go, col.transpose(2, 3)), {0}).reshape(ws);  // [G, O/G, K] summed over N
      }
      if (node.needs_input_grad(2)) gb = sum(grads[0], {0, 2, 3});
      return TensorList{gx, gw, gb};
    });
  }
  return out;
}

namespace {
Tensor pool2d(Op id, bool is_max, const Tensor& input, std::vector<int64_t> kernel, std::vector<int64_t> stride,
              std::vector<int64_t> padding) {
  const char* op = op_name(id);
  OpScope scope(id);
  kernel = pair_arg(op, "kernel size", kernel, 1);
  stride = stride.empty() ? kernel : pair_arg(op, "stride", stride, 1);
  padding = pair_arg(op, "padding", padding, 0);
  MG_CHECK(padding[0] <= kernel[0] / 2 && padding[1] <= kernel[1] / 2, ValueError, op,
           ": expected padding at most half the kernel size, got padding ", padding[0], "x", padding[1], " for kernel ",
           kernel[0], "x", kernel[1]);
  auto g = geometry(op, input, kernel[0], kernel[1], stride, padding, {1, 1});
  Tensor x;
  {
    NoGradGuard ng;
    x = input.contiguous();
  }
  Tensor out = new_output({g.n, g.c, g.oh, g.ow}, input.dtype(), input.device());
  Tensor idx = is_max ? new_output(out.shape(), kInt64, input.device()) : Tensor();
  if (is_max)
    kernels::run(input.device(), &Backend::max_pool2d, x, out, idx, g);
  else
    kernels::run(input.device(), &Backend::avg_pool2d, x, out, g);
  SavedTensor si(is_max && autograd::any_requires_grad({input}) ? idx : Tensor());
  Shape xs = input.shape();
  autograd::record(id, {input}, {out}, [=](const TensorList& grads, const Node&) {
    Tensor go = grads[0].contiguous(), gx = zeros_output(xs, go.dtype(), go.device());
    Tensor idx = is_max ? si.get() : Tensor();
    if (is_max)
      kernels::run(go.device(), &Backend::max_pool2d_backward, go, idx, gx);
    else
      kernels::run(go.device(), &Backend::avg_pool2d_backward, go, gx, g);
    // The backward is linear in the gradient; its own backward is the adjoint: gathering at the
    // argmax indices, or the average pooling itself.
    autograd::record(id, {grads[0]}, {gx}, [=](const TensorList& gg, const Node&) {
      if (!is_max) return TensorList{avg_pool2d(gg[0], kernel, stride, padding)};
      Tensor flat = gg[0].reshape({g.n, g.c, g.h * g.w});
      return TensorList{gather(flat, 2, idx.view({g.n, g.c, g.oh * g.ow})).view({g.n, g.c, g.oh, g.ow})};
    });
    return TensorList{gx};
  });
  return out;
}
}  // namespace

Tensor max_pool2d(const Tensor& input, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding) {
  return pool2d(Op::max_pool2d, true, input, kernel, stride, padding);
}
Tensor avg_pool2d(const Tensor& input, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding) {
  check_floating("avg_pool2d", input);
  return pool2d(Op::avg_pool2d, false, input, kernel, stride, padding);
}

}  // namespace mg
