// Fused scaled dot-product attention (flash-attention style): the forward keeps each row's
// log-sum-exp instead of the probabilities, and backward recomputes them tile by tile.
#include <cmath>

#include <memgrad/core/autocast.h>
#include <memgrad/core/flops.h>
#include <memgrad/core/ops/op_util.h>
#include <memgrad/core/random.h>

namespace mg {

using namespace detail;

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool is_causal,
                                    double dropout_p, double scale) {
  Tensor q = amp::cast_for_half_op(q_in), k = amp::cast_for_half_op(k_in), v = amp::cast_for_half_op(v_in);
  OpScope op_scope(Op::attention);
  check_floating("attention", q);
  for (const Tensor* t : {&k, &v}) {
    check_same_device("attention", q, *t);
    MG_CHECK(t->dtype() == q.dtype(), DTypeError, "attention: expected q, k and v of one dtype, got ", q.dtype(), ", ",
             k.dtype(), " and ", v.dtype());
  }
  MG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.shape() == k.shape() && q.size(-1) == k.size(-1) &&
               Shape(q.shape().begin(), q.shape().end() - 2) == Shape(k.shape().begin(), k.shape().end() - 2),
           ShapeError, "attention: expected q [..., Tq, D] and k, v [..., Tk, D] with the same leading dims, got q ",
           shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  MG_CHECK(dropout_p >= 0 && dropout_p < 1, ValueError, "attention: expected dropout_p in [0, 1), got ", dropout_p);
  MG_CHECK(q.size(-1) >= 1, ShapeError, "attention: expected a head dim of at least 1, got q ", shape_str(q.shape()));
  const int64_t Tq = q.size(-2), Tk = k.size(-2), D = q.size(-1);
  const int64_t BH = numel_of(Shape(q.shape().begin(), q.shape().end() - 2));  // also when Tq or Tk is 0
  kernels::AttentionParams p;
  p.scale = scale > 0 ? scale : 1.0 / std::sqrt(double(D));
  p.causal = is_causal;
  p.dropout_p = dropout_p;
  if (dropout_p > 0) {  // the counters of the [BH, Tq, Tk] probabilities, as the dropout op reserves them
    auto d = default_generator().draw(uint64_t(BH * Tq * Tk));
    p.seed = d.seed, p.offset = d.offset;
  }
  Tensor qc, kc, vc;
  {
    NoGradGuard ng;
    qc = q.contiguous();
    kc = k.contiguous();
    vc = v.contiguous();
  }
  Tensor out = new_like(qc);
  Shape lse_shape(q.shape().begin(), q.shape().end() - 1);
  const DType stat = q.dtype() == kFloat64 ? kFloat64 : kFloat32;  // of lse and delta
  Tensor lse = new_output(lse_shape, stat, q.device());
  auto as3 = [BH](const Tensor& t) { return t.view({BH, t.size(-2), t.size(-1)}); };
  kernels::run(q.device(), &Backend::attention, as3(qc), as3(kc), as3(vc), as3(out), lse.view({BH, Tq}), p);
  // Multiply-adds of q k^T and p v over the pairs a query sees (about half of them when causal).
  double pairs = 0;
  for (int64_t i = 0; i < Tq; ++i) pairs += double(is_causal ? std::min(i + 1, Tk) : Tk);
  count_flops(4.0 * double(BH) * pairs * double(D));
  if (autograd::any_requires_grad({q, k, v})) {
    SavedTensor sq(qc), sk(kc), sv(vc), so(out), sl(lse);
    autograd::record(Op::attention, {q, k, v}, {out}, [=](const TensorList& g, const Node&) {
      Tensor qs = sq.get(), ks = sk.get(), vs = sv.get();
      Tensor gq = new_like(qs), gk = new_like(ks), gv = new_like(vs);
      Tensor delta;  // rowsum(grad_out * out) [BH, Tq]: the kernels' only scratch
      {
        MemoryScope scratch(Category::Workspace);
        delta = new_output({BH, Tq}, stat, qs.device());
      }
      kernels::run(qs.device(), &Backend::attention_backward, as3(g[0].contiguous()), as3(qs), as3(ks), as3(vs),
                   as3(so.get()), sl.get().view({BH, Tq}), delta, as3(gq), as3(gk), as3(gv), p);
      count_flops(10.0 * double(BH) * pairs * double(D));  // S again, dV, dP, dQ and dK
      return TensorList{gq, gk, gv};
    });
  }
  return out;
}

}  // namespace mg
