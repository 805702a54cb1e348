// Neural-network ops: layer and batch norm, dropout, losses, convolution and pooling.
#include <memgrad/core/autocast.h>
#include <memgrad/core/cuda.h>
#include <memgrad/core/flops.h>
#include <memgrad/core/ops/op_util.h>
#include <memgrad/core/random.h>

namespace mg {

using namespace detail;
using kernels::Conv2dGeometry;

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  Tensor x = amp::cast_for_float_op(x_in), weight = amp::cast_for_float_op(weight_in),
         bias = amp::cast_for_float_op(bias_in);
  OpScope scope(Op::layer_norm);
  check_floating("layer_norm", x);
  size_t k = normalized_shape.size();
  MG_CHECK(k >= 1 && size_t(x.dim()) >= k && Shape(x.shape().end() - int64_t(k), x.shape().end()) == normalized_shape,
           ShapeError, "layer_norm: expected an input ending in ", shape_str(normalized_shape), ", got ",
           shape_str(x.shape()));
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) {
      MG_CHECK(p->shape() == normalized_shape, ShapeError, "layer_norm: expected weight and bias of shape ",
               shape_str(normalized_shape), ", got ", shape_str(p->shape()));
      MG_CHECK(p->dtype() == x.dtype(), DTypeError, "layer_norm: expected weight and bias of dtype ", x.dtype(),
               ", got ", p->dtype());
      check_same_device("layer_norm", x, *p);
    }
  int64_t n = numel_of(normalized_shape), rows = x.numel() / std::max<int64_t>(n, 1);
  Tensor xc, wc, bc;
  {
    NoGradGuard ng;
    xc = x.contiguous();
    if (weight.defined()) wc = weight.contiguous();
    if (bias.defined()) bc = bias.contiguous();
  }
  Tensor out = new_like(xc);
  Tensor mean = new_output({rows}, kFloat32, x.device()), rstd = new_output({rows}, kFloat32, x.device());
  kernels::run(x.device(), &Backend::layer_norm, xc.view({rows, n}), wc, bc, out, mean, rstd, eps);
  if (autograd::any_requires_grad({x, weight, bias})) {
    SavedTensor sx(xc), sm(mean), sr(rstd), sw(wc);
    Shape ns = normalized_shape;
    autograd::record(Op::layer_norm, {x, weight, bias}, {out}, [=](const TensorList& g, const Node& node) {
      Tensor xs = sx.get(), w = sw.defined() ? sw.get() : Tensor();
      Tensor gx = node.needs_input_grad(0) ? new_like(xs) : Tensor();
      Tensor gw = node.needs_input_grad(1) ? new_output(ns, xs.dtype(), xs.device()) : Tensor();
      Tensor gb = node.needs_input_grad(2) ? new_output(ns, xs.dtype(), xs.device()) : Tensor();
      kernels::run(xs.device(), &Backend::layer_norm_backward, g[0].contiguous().view({rows, n}), xs.view({rows, n}),
                   sm.get(), sr.get(), w, gx, gw, gb);
      return TensorList{gx, gw, gb};
    });
  }
  return out;
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

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  MG_CHECK(p >= 0 && p <= 1, ValueError, "dropout: expected a probability in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  OpScope scope(Op::dropout);
  check_floating("dropout", x);
  Tensor xc;
  {
    NoGradGuard ng;
    xc = x.contiguous();
  }
  Tensor out = new_like(xc);
  auto [seed, offset] = generator_or_default(generator).draw(uint64_t(x.numel()));
  kernels::run(x.device(), &Backend::dropout, xc, out, p, seed, offset);
  // Captured by name: C++17 lambdas cannot capture structured bindings (clang refuses them).
  autograd::record(Op::dropout, {x}, {out}, [=, seed = seed, offset = offset](const TensorList& g, const Node&) {
    Tensor gc = g[0].contiguous(), gi = new_like(gc);  // the same counters give the same mask
    kernels::run(gc.device(), &Backend::dropout, gc, gi, p, seed, offset);
    return TensorList{gi};
  });
  return out;
}

namespace {
// Per-row cross-entropy of logits [N, C] against int64 targets [N].
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& target, int64_t ignore_index, double smoothing) {
  OpScope scope(Op::cross_entropy);
  Tensor out = new_output({logits.size(0)}, logits.dtype(), logits.device());
  kernels::run(logits.device(), &Backend::cross_entropy, logits, target, out, ignore_index, smoothing);
  if (autograd::any_requires_grad({logits})) {
    SavedTensor sl(logits), st(target);
    autograd::record(Op::cross_entropy, {logits}, {out}, [=](const TensorList& g, const Node&) {
      Tensor l = sl.get(), gi = new_like(l);
      kernels::run(l.device(), &Backend::cross_entropy_backward, g[0].contiguous(), l, st.get(), gi, ignore_index,
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

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, int64_t ignore_index, double smoothing,
                     Reduction reduction) {
  Tensor logits = amp::cast_for_float_op(logits_in);
  check_floating("cross_entropy", logits);
  check_dtype("cross_entropy", target, kInt64, "class-index targets");
  check_same_device("cross_entropy", logits, target);
  MG_CHECK(smoothing >= 0 && smoothing <= 1, ValueError, "cross_entropy: expected label_smoothing in [0, 1], got ",
           smoothing);
  MG_CHECK(logits.dim() >= 2, ShapeError, "cross_entropy: expected logits [N, C] or [N, C, d...], got ",
           shape_str(logits.shape()));
  Shape expect = logits.shape();
  expect.erase(expect.begin() + 1);
  MG_CHECK(target.shape() == expect, ShapeError, "cross_entropy: expected a target of shape ", shape_str(expect),
           " for logits ", shape_str(logits.shape()), ", got ", shape_str(target.shape()));
  Tensor rows = logits;
  if (logits.dim() > 2) {  // [N, C, d...] -> [N * d..., C]
    std::vector<int64_t> perm{0};
    for (int64_t d = 2; d < logits.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    rows = logits.permute(perm);
  }
  Tensor flat_target;
  {
    NoGradGuard ng;
    flat_target = target.contiguous().reshape({-1});
  }
  Tensor losses =
      cross_entropy_rows(rows.reshape({-1, logits.size(1)}).contiguous(), flat_target, ignore_index, smoothing);
  if (reduction == Reduction::None) return losses.view(target.shape());
  if (reduction == Reduction::Sum) return losses.sum();
  Tensor count;
  {
    NoGradGuard ng;
    count = ne(flat_target, Scalar(ignore_index)).sum().to(logits.dtype());
  }
  return losses.sum() / count;  // mean over the targets that are not ignored
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
  auto columns = [g, G, K, L](const Tensor& x) {
    MemoryScope scratch(Category::Workspace);
    Tensor col = new_output({g.n, G, K, L}, x.dtype(), x.device());
    kernels::run(x.device(), &Backend::im2col, x.contiguous(), col, g);
    return col;
  };
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
        if (!direct) return Tensor();
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
        Tensor gcol = matmul(w.transpose(1, 2), go);  // [N, G, K, L]
        gx = zeros_output(xs, go.dtype(), go.device());
        kernels::run(go.device(), &Backend::col2im, gcol.contiguous(), gx, g);
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
    if (is_max)
      kernels::run(go.device(), &Backend::max_pool2d_backward, go, si.get(), gx);
    else
      kernels::run(go.device(), &Backend::avg_pool2d_backward, go, gx, g);
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
