// The softmax family: softmax, log_softmax and the fused scaled_masked_softmax of attention scores.
#include <memgrad/core/autocast.h>
#include <memgrad/ops/op_util.h>

namespace mg {

using namespace detail;
using kernels::AttentionMask;

namespace {
Tensor softmax_op(Op id, const Tensor& x_in, int64_t dim_, bool log) {
  const char* name = op_name(id);
  Tensor x = amp::cast_for_float_op(x_in);
  OpScope scope(id);
  check_floating(name, x);
  int64_t dim = wrap_dim(dim_, x.dim(), name);
  const std::vector<int64_t> dims = x.dim() ? std::vector<int64_t>{dim} : std::vector<int64_t>{};
  Layout l;
  {
    NoGradGuard ng;
    l = arrange(x, dims);
  }
  Tensor out = new_like(l.x);
  kernels::run(x.device(), &Backend::softmax, l.x, out, l.outer, l.r, l.inner, log);
  if (autograd::any_requires_grad({x})) {
    SavedTensor so(out);
    autograd::record(
        id, {x}, {out},
        [so, l = std::array<int64_t, 3>{l.outer, l.r, l.inner}, log, dims](const TensorList& g, const Node&) {
          Tensor y = so.get();
          if (autograd::creating_graph())  // the kernel's formula in ops, differentiable
            return TensorList{log ? g[0] - exp(y) * sum(g[0], dims, true) : y * (g[0] - sum(g[0] * y, dims, true))};
          Tensor gc = g[0].contiguous(), gi = new_like(y);
          kernels::run(y.device(), &Backend::softmax_backward, gc, y, gi, l[0], l[1], l[2], log);
          return TensorList{gi};
        });
  }
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(Op::softmax, x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(Op::log_softmax, x, dim, true); }

Tensor scaled_masked_softmax(const Tensor& x_in, double scale, const Tensor& attn_mask_in, bool is_causal) {
  const bool additive = attn_mask_in.defined() && attn_mask_in.dtype() != kBool;
  Tensor x = amp::cast_for_float_op(x_in), attn_mask = additive ? amp::cast_for_float_op(attn_mask_in) : attn_mask_in;
  OpScope scope(Op::scaled_masked_softmax);
  check_floating("scaled_masked_softmax", x);
  MG_CHECK(x.dim() >= 2, ShapeError, "scaled_masked_softmax: expected scores [..., Tq, Tk], got ",
           shape_str(x.shape()));
  const int64_t Tq = x.size(-2), Tk = x.size(-1), BH = numel_of(Shape(x.shape().begin(), x.shape().end() - 2));
  Tensor mask = expand_mask("scaled_masked_softmax", "the input", attn_mask, is_causal, x, x.shape());
  const AttentionMask m = mask.defined() ? describe_mask(mask, !additive) : AttentionMask{};
  Tensor xc;
  {
    NoGradGuard ng;
    xc = x.contiguous();
  }
  Tensor out = new_like(xc);
  kernels::run(x.device(), &Backend::scaled_masked_softmax, xc.view({BH, Tq, Tk}), mask, out.view({BH, Tq, Tk}), scale,
               is_causal, m);
  const TensorList inputs = additive ? TensorList{x, attn_mask} : TensorList{x};
  if (autograd::any_requires_grad(inputs)) {
    SavedTensor so(out);
    const Shape mask_shape = additive ? attn_mask.shape() : Shape{};
    autograd::record(Op::scaled_masked_softmax, inputs, {out}, [=](const TensorList& g, const Node& node) {
      // softmax's backward, then the scale's; the additive mask gets softmax's input gradient
      Tensor y = so.get(), gz;
      const bool need_mask = additive && node.needs_input_grad(1);
      if (autograd::creating_graph()) {
        gz = y * (g[0] - sum(g[0] * y, {-1}, true));
      } else {
        gz = new_like(y);
        kernels::run(y.device(), &Backend::softmax_backward, g[0].contiguous(), y, gz, BH * Tq, Tk, int64_t(1), false);
      }
      TensorList grads{Tensor()};
      if (need_mask)
        grads.push_back(sum_to(gz, mask_shape));
      else if (additive)
        grads.push_back(Tensor());
      if (!node.needs_input_grad(0)) return grads;
      if (need_mask || autograd::creating_graph()) {
        grads[0] = gz * scale;
      } else {  // gz is this node's own: scaled in place
        kernels::run(y.device(), &Backend::unary, kernels::UnaryOp::MulScalar, gz, gz, kernels::UnaryParams{scale, 0});
        grads[0] = gz;
      }
      return grads;
    });
  }
  return out;
}

Tensor Tensor::softmax(int64_t dim) const { return mg::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return mg::log_softmax(*this, dim); }

}  // namespace mg
