// Normalization ops: layer norm (and the fused add_layer_norm), RMS norm, group norm and batch norm.
#include <memgrad/core/autocast.h>
#include <memgrad/ops/op_util.h>

namespace mg {

using namespace detail;

namespace {

// layer_norm's and rms_norm's checks (`affine` names their parameters in messages); the weight and
// bias made contiguous (undefined when not given) and the [rows, n] the kernels see.
struct LayerNormArgs {
  Tensor w, b;
  int64_t rows, n;
};
LayerNormArgs layer_norm_args(const char* op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                              const Tensor& bias, const char* affine = "weight and bias") {
  check_floating(op, x);
  size_t k = normalized_shape.size();
  MG_CHECK(k >= 1 && size_t(x.dim()) >= k && Shape(x.shape().end() - int64_t(k), x.shape().end()) == normalized_shape,
           ShapeError, op, ": expected an input ending in ", shape_str(normalized_shape), ", got ",
           shape_str(x.shape()));
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) {
      MG_CHECK(p->shape() == normalized_shape, ShapeError, op, ": expected ", affine, " of shape ",
               shape_str(normalized_shape), ", got ", shape_str(p->shape()));
      MG_CHECK(p->dtype() == x.dtype(), DTypeError, op, ": expected ", affine, " of dtype ", x.dtype(), ", got ",
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

// A statistic per row, [rows]: float32, float64 for float64 inputs.
Tensor row_stat(const Tensor& x, int64_t rows) {
  return new_output({rows}, x.dtype() == kFloat64 ? kFloat64 : kFloat32, x.device());
}

// Mean and rstd.
std::pair<Tensor, Tensor> layer_norm_stats(const Tensor& x, int64_t rows) {
  return {row_stat(x, rows), row_stat(x, rows)};
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

Tensor rms_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, double eps) {
  Tensor x = amp::cast_for_float_op(x_in), weight = amp::cast_for_float_op(weight_in);
  OpScope scope(Op::rms_norm);
  LayerNormArgs a = layer_norm_args("rms_norm", x, normalized_shape, weight, Tensor(), "weight");
  Tensor xc;
  {
    NoGradGuard ng;
    xc = x.contiguous();
  }
  Tensor out = new_like(xc), rstd = row_stat(x, a.rows);
  kernels::run(x.device(), &Backend::rms_norm, xc.view({a.rows, a.n}), a.w, out, rstd, eps);
  if (!autograd::any_requires_grad({x, weight})) return out;
  SavedTensor sx(xc, x), sr(rstd), sw(a.w, weight);
  const Shape ns = normalized_shape;
  const int64_t rows = a.rows, n = a.n;
  autograd::record(Op::rms_norm, {x, weight}, {out}, [=](const TensorList& g, const Node& node) {
    const Tensor xs = sx.get(), w = sw.defined() ? sw.get() : Tensor();
    Tensor gx, gw;
    if (autograd::creating_graph()) {  // recompute from differentiable ops, and differentiate those
      auto composed = [&](const TensorList& in) {
        Tensor x2 = in[0].reshape({rows, n});
        Tensor y = (x2 * rsqrt((x2 * x2).mean({1}, true) + eps)).view(xs.shape());
        return TensorList{in[1].defined() ? y * in[1] : y};
      };
      TensorList r = autograd::differentiate(composed, {xs, w}, {g[0]});
      gx = r[0], gw = r[1];
    } else {
      gx = node.needs_input_grad(0) ? new_like(xs) : Tensor();
      gw = node.needs_input_grad(1) ? new_output(ns, xs.dtype(), xs.device()) : Tensor();
      kernels::run(xs.device(), &Backend::rms_norm_backward, g[0].contiguous().view({rows, n}), xs.view({rows, n}),
                   sr.get(), w, gx, gw);
    }
    return TensorList{node.needs_input_grad(0) ? gx : Tensor(), node.needs_input_grad(1) ? gw : Tensor()};
  });
  return out;
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

}  // namespace mg
