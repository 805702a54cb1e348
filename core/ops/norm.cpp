// Batch normalization: per-channel statistics of the batch (or the running ones), the running
// statistics' update, and the backward.
#include <memgrad/core/autocast.h>
#include <memgrad/core/ops/op_util.h>

namespace mg {

using namespace detail;

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps) {
  Tensor x = amp::cast_for_float_op(x_in), weight = amp::cast_for_float_op(weight_in),
         bias = amp::cast_for_float_op(bias_in);
  OpScope scope("batch_norm");
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
  kernels::run("batch_norm", x.device(), &Backend::batch_norm, xc.view({N, C, S}), wc, bc, out.view({N, C, S}), mean,
               var, rstd, training, eps);
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
    autograd::record("batch_norm", {x, weight, bias}, {out}, [=](const TensorList& g, const Node& node) {
      Tensor xs = sx.get(), w = sw.defined() ? sw.get() : Tensor();
      Tensor gx = node.needs_input_grad(0) ? new_like(xs) : Tensor();
      Tensor gw = node.needs_input_grad(1) ? new_output({C}, xs.dtype(), xs.device()) : Tensor();
      Tensor gb = node.needs_input_grad(2) ? new_output({C}, xs.dtype(), xs.device()) : Tensor();
      kernels::run("batch_norm_backward", xs.device(), &Backend::batch_norm_backward, g[0].contiguous().view({N, C, S}),
                   xs.view({N, C, S}), sm.get(), sr.get(), w, gx.defined() ? gx.view({N, C, S}) : gx, gw, gb, training);
      return TensorList{gx, gw, gb};
    });
  }
  return out;
}

}  // namespace mg
