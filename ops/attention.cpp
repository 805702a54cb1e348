// Fused scaled dot-product attention (flash-attention style): the forward keeps each row's
// log-sum-exp instead of the probabilities, and backward recomputes them tile by tile.
#include <cmath>

#include <memgrad/core/autocast.h>
#include <memgrad/core/flops.h>
#include <memgrad/core/random.h>
#include <memgrad/ops/op_util.h>

namespace mg {

using namespace detail;
using kernels::AttentionMask;
using kernels::AttentionParams;

namespace {

// What the fused kernels compute, from differentiable ops on q [BH, Tq, D], k, v [BH, Tk, D] and
// the mask expanded to [BH, Tq, Tk] (or undefined). It keeps the [BH, Tq, Tk] probabilities: the
// path for an additive mask that requires grad, and the backward of a backward.
Tensor attention_math(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttentionParams& p) {
  const int64_t Tq = q.size(1), Tk = k.size(1);
  const auto opts = TensorOptions(q.dtype()).device(q.device());
  Tensor s = matmul(q, k.transpose(1, 2)) * p.scale;
  if (p.causal) s = masked_fill(s, triu(ones({Tq, Tk}, TensorOptions(kBool).device(q.device())), 1), -INFINITY);
  if (p.mask.kind == AttentionMask::Kind::Bool) s = where(mask, s, full({}, -INFINITY, opts));
  if (p.mask.kind == AttentionMask::Kind::Additive) s = s + mask;
  // A row that sees no key gets zeros, as from the kernels (softmax would give NaN).
  Tensor sees_any;
  {
    NoGradGuard ng;
    sees_any = gt(amax(s, {2}, true), Scalar(-INFINITY));
  }
  Tensor zero = zeros({}, opts);
  Tensor probs = where(sees_any, softmax(where(sees_any, s, zero), 2), zero);
  if (p.dropout_p > 0) probs = dropout_with(probs, p.dropout_p, p.seed, p.offset);
  return matmul(probs, v);
}

}  // namespace

AttentionMask detail::describe_mask(const Tensor& expanded, bool is_bool) {
  AttentionMask m;
  m.kind = is_bool ? AttentionMask::Kind::Bool : AttentionMask::Kind::Additive;
  const int64_t nd = expanded.dim() - 2;
  for (int64_t d = 0; d < nd; ++d) {
    if (expanded.size(d) == 1) continue;
    MG_CHECK(m.nd < AttentionMask::kMaxDims, NotImplementedError,
             "attention: the fused kernels take masks over at most ", AttentionMask::kMaxDims,
             " batch dims of size > 1, got shape ", shape_str(expanded.shape()));
    m.size[m.nd] = expanded.size(d);
    m.stride[m.nd++] = expanded.stride(d);
  }
  m.stride_q = expanded.stride(-2);
  m.stride_k = expanded.stride(-1);
  return m;
}

Tensor detail::expand_mask(const char* op, const char* like_name, const Tensor& attn_mask, bool is_causal,
                           const Tensor& like, const Shape& want) {
  if (!attn_mask.defined()) return Tensor();
  MG_CHECK(!is_causal, ValueError, op, ": expected either attn_mask or is_causal, got both");
  MG_CHECK(attn_mask.dtype() == kBool || attn_mask.dtype() == like.dtype(), DTypeError, op,
           ": expected a bool attn_mask or one of ", like_name, "'s dtype ", like.dtype(), ", got ", attn_mask.dtype());
  check_same_device(op, like, attn_mask);
  const Shape& have = attn_mask.shape();
  bool fits = have.size() <= want.size();
  for (size_t i = 0; fits && i < have.size(); ++i) {
    const int64_t h = have[have.size() - 1 - i], w = want[want.size() - 1 - i];
    fits = h == w || h == 1;
  }
  MG_CHECK(fits, ShapeError, op, ": expected an attn_mask that broadcasts to ", shape_str(want), ", got ",
           shape_str(have));
  NoGradGuard ng;
  return attn_mask.expand(want);
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  Tensor q = amp::cast_for_half_op(q_in), k = amp::cast_for_half_op(k_in), v = amp::cast_for_half_op(v_in);
  OpScope op_scope(Op::attention);
  check_floating("attention", q);
  for (const Tensor* t : {&k, &v}) {
    check_same_device("attention", q, *t);
    MG_CHECK(t->dtype() == q.dtype(), DTypeError, "attention: expected q, k and v of one dtype, got ", q.dtype(), ", ",
             k.dtype(), " and ", v.dtype());
  }
  MG_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2 && q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
           ShapeError, "attention: expected q [..., Tq, D], k [..., Tk, D] and v [..., Tk, Dv], got q ",
           shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  MG_CHECK(v.size(-1) == q.size(-1), ShapeError, "attention: expected v's last dim equal to the head dim ", q.size(-1),
           " (the kernels take Dv = D), got v ", shape_str(v.shape()));
  MG_CHECK(dropout_p >= 0 && dropout_p < 1, ValueError, "attention: expected dropout_p in [0, 1), got ", dropout_p);
  MG_CHECK(q.size(-1) >= 1, ShapeError, "attention: expected a head dim of at least 1, got q ", shape_str(q.shape()));
  auto batch_of = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); };
  const Shape batch =
      broadcast_shapes(broadcast_shapes(batch_of(q), batch_of(k), "attention"), batch_of(v), "attention");
  const int64_t Tq = q.size(-2), Tk = k.size(-2), D = q.size(-1);
  const int64_t BH = numel_of(batch);  // also when Tq or Tk is 0
  auto with = [&batch](int64_t a, int64_t b) {
    Shape s = batch;
    s.push_back(a);
    s.push_back(b);
    return s;
  };
  AttentionParams p;
  p.scale = scale ? *scale : 1.0 / std::sqrt(double(D));
  p.causal = is_causal;
  p.dropout_p = dropout_p;
  Tensor mask = expand_mask("attention", "q", attn_mask, is_causal, q, with(Tq, Tk));  // a view, no copy
  if (mask.defined()) p.mask = describe_mask(mask, attn_mask.dtype() == kBool);
  if (dropout_p > 0) {  // the counters of the [BH, Tq, Tk] probabilities, as the dropout op reserves them
    auto d = default_generator().draw(uint64_t(BH * Tq * Tk));
    p.seed = d.seed, p.offset = d.offset;
  }
  // Multiply-adds of q k^T and p v over the pairs a query sees (about half of them when causal).
  double pairs = 0;
  for (int64_t i = 0; i < Tq; ++i) pairs += double(is_causal ? std::min(i + 1, Tk) : Tk);
  auto as3 = [BH](const Tensor& t) { return t.reshape({BH, t.size(-2), t.size(-1)}); };

  if (mask.defined() && autograd::any_requires_grad({attn_mask})) {  // the mask's gradient needs the scores
    count_flops(4.0 * double(BH) * pairs * double(D));
    Tensor m3 = attn_mask.expand(with(Tq, Tk)).reshape({BH, Tq, Tk});
    return attention_math(as3(q.expand(with(Tq, D))), as3(k.expand(with(Tk, D))), as3(v.expand(with(Tk, D))), m3, p)
        .view(with(Tq, D));
  }
  // Contiguous [batch..., T, D] operands: copies only of broadcast or strided inputs.
  Tensor qc, kc, vc;
  {
    NoGradGuard ng;
    qc = q.expand(with(Tq, D)).contiguous();
    kc = k.expand(with(Tk, D)).contiguous();
    vc = v.expand(with(Tk, D)).contiguous();
  }
  Tensor out = new_like(qc);
  const DType stat = q.dtype() == kFloat64 ? kFloat64 : kFloat32;  // of lse and delta
  Shape lse_shape = batch;
  lse_shape.push_back(Tq);
  Tensor lse = new_output(lse_shape, stat, q.device());
  kernels::run(q.device(), &Backend::attention, as3(qc), as3(kc), as3(vc), mask, as3(out), lse.view({BH, Tq}), p);
  count_flops(4.0 * double(BH) * pairs * double(D));
  if (autograd::any_requires_grad({q, k, v})) {
    SavedTensor sq(qc, q), sk(kc, k), sv(vc, v), so(out), sl(lse), sm(mask);
    const Shape shapes[3] = {q.shape(), k.shape(), v.shape()};
    autograd::record(Op::attention, {q, k, v}, {out}, [=](const TensorList& g, const Node& node) {
      Tensor qs = sq.get(), ks = sk.get(), vs = sv.get(), m = sm.defined() ? sm.get() : Tensor();
      TensorList grads;
      if (autograd::creating_graph()) {  // recompute from differentiable ops, and differentiate those
        Tensor m3 = m.defined() ? m.reshape({BH, Tq, Tk}) : Tensor();
        grads = autograd::differentiate(
            [&](const TensorList& in) { return TensorList{attention_math(as3(in[0]), as3(in[1]), as3(in[2]), m3, p)}; },
            {qs, ks, vs}, {g[0].reshape({BH, Tq, D})});
        for (size_t i = 0; i < 3; ++i)
          if (grads[i].defined()) grads[i] = grads[i].view((i == 0 ? qs : i == 1 ? ks : vs).shape());
      } else {
        grads = {new_like(qs), new_like(ks), new_like(vs)};
        Tensor delta;  // rowsum(grad_out * out) [BH, Tq]: the kernels' only scratch
        {
          MemoryScope scratch(Category::Workspace);
          delta = new_output({BH, Tq}, stat, qs.device());
        }
        kernels::run(qs.device(), &Backend::attention_backward, as3(g[0].contiguous()), as3(qs), as3(ks), as3(vs), m,
                     as3(so.get()), sl.get().view({BH, Tq}), delta, as3(grads[0]), as3(grads[1]), as3(grads[2]), p);
        count_flops(10.0 * double(BH) * pairs * double(D));  // S again, dV, dP, dQ and dK
      }
      for (size_t i = 0; i < 3; ++i)  // broadcast operands sum their gradient back to their own shape
        grads[i] = node.needs_input_grad(i) && grads[i].defined() ? sum_to(grads[i], shapes[i]) : Tensor();
      return grads;
    });
  }
  return out;
}

}  // namespace mg
