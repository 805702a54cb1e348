// matmul with torch.matmul's rules, and linear (x W^T + b) as one op that saves only x and W.
#include <memgrad/core/autocast.h>
#include <memgrad/core/flops.h>
#include <memgrad/ops/op_util.h>

namespace mg {

using namespace detail;

namespace {

// t [..., R, C] as [B, R, C] for the kernels, which take either matrix stride 1. Where the batch
// dims do not merge, reshape copies: a transposed matrix (k^T) is then copied in its own
// orientation, rows not columns, and handed over transposed.
Tensor as_batch(const Tensor& t, int64_t B, int64_t R, int64_t C) {
  if (R > 1 && C > 1 && t.stride(-1) != 1 && t.stride(-2) == 1)
    return t.transpose(-2, -1).reshape({B, C, R}).transpose(1, 2);
  return t.reshape({B, R, C});
}

// The first of t's nb leading (batch) dims from which on they step by one stride, so that
// reshaping them into one dim is a view.
size_t merge_start(const Tensor& t, size_t nb) {
  int64_t stride = 0, span = 0;  // of the merged dims so far; span 0: none yet
  for (size_t i = nb; i-- > 0;) {
    if (t.size(int64_t(i)) == 1) continue;
    if (span == 0)
      stride = t.stride(int64_t(i)), span = 1;
    else if (t.stride(int64_t(i)) != stride * span)
      return i + 1;
    span *= t.size(int64_t(i));
  }
  return 0;
}

// Operands whose batch dims do not merge are copied when a kernel call per index of the outer
// dims would cost more: below 64K operand elements a call (each call's threads split only its own
// products; measured on split heads, 2 threads: the calls win at 64K, lose up to 2x below 16K), or
// beyond 1024 calls (which also bounds the shape-only work on meta).
constexpr int64_t kMinCallElements = int64_t(1) << 16, kMaxCalls = 1024;

// out [batch..., M, N] = x [batch..., M, K] @ y [batch..., K, N] (batch dims broadcast already).
// Batch dims that do not merge (heads split from a [B, T, 3C] projection: [B, H] with strides
// T*3C and D) are looped over instead of copied, where the products are large enough.
void run_batched(const Tensor& x, const Tensor& y, const Tensor& out, const Shape& batch, int64_t M, int64_t K,
                 int64_t N) {
  const size_t nb = batch.size(), s = std::max(merge_start(x, nb), merge_start(y, nb));
  const int64_t total = numel_of(batch), inner = numel_of(Shape(batch.begin() + s, batch.end()));
  const int64_t calls = inner > 0 ? total / inner : 0;
  if (calls <= 1 || calls > kMaxCalls || inner * (M * K + K * N) < kMinCallElements)
    return kernels::run(x.device(), &Backend::matmul, as_batch(x, total, M, K), as_batch(y, total, K, N),
                        out.view({total, M, N}));
  Tensor outs = out.view({calls, inner, M, N});
  // On meta a call only books its kernel's scratch, freed before the next call asks for the same
  // bytes again: one call leaves the allocator as all of them would (and plans of split heads stay
  // fast), while the FLOPs are counted for the whole product. Not under a budget, whose runtime
  // prices every kernel run.
  const bool one = x.is_meta() && !(budget::detail::any_active() && budget::detail::active(x.device()));
  const int64_t run = one ? std::min<int64_t>(calls, 1) : calls;
  for (int64_t c = 0; c < run; ++c) {
    Tensor xc = x, yc = y;
    int64_t rest = c;
    for (size_t d = s; d-- > 0;) {  // c's index along each outer dim, the last one fastest
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      xc = xc.select(int64_t(d), i), yc = yc.select(int64_t(d), i);
    }
    kernels::run(x.device(), &Backend::matmul, as_batch(xc, inner, M, K), as_batch(yc, inner, K, N), outs.select(0, c));
  }
}

// Batched product of a [..., M, K] and b [..., K, N] with broadcast batch dims.
Tensor batched_matmul(const Tensor& a, const Tensor& b) {
  OpScope scope(Op::matmul);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  MG_CHECK(b.size(-2) == K, ShapeError, "matmul: expected the inner dims to match, got ", shape_str(a.shape()), " @ ",
           shape_str(b.shape()), " (", K, " vs ", b.size(-2), ")");
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "matmul");
  DType ct = result_type(a, b);
  int64_t B = numel_of(batch);
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = new_output(out_shape, ct, a.device());
  {
    NoGradGuard ng;
    Shape sa = batch, sb = batch;
    sa.insert(sa.end(), {M, K});
    sb.insert(sb.end(), {K, N});
    run_batched(a.to(ct).expand(sa), b.to(ct).expand(sb), out, batch, M, K, N);
  }
  count_flops(2.0 * double(B) * double(M) * double(N) * double(K));
  if (autograd::any_requires_grad({a, b})) {
    SavedTensor sa(b.requires_grad() ? a : Tensor()), sb(a.requires_grad() ? b : Tensor());
    Shape as = a.shape(), bs = b.shape();
    DType at = a.dtype(), bt = b.dtype();
    autograd::record(Op::matmul, {a, b}, {out}, [=](const TensorList& g, const Node& n) {
      Tensor ga, gb;
      if (n.needs_input_grad(0)) ga = grad_for(matmul(g[0], sb.get().transpose(-1, -2)), as, at);
      if (n.needs_input_grad(1)) gb = grad_for(matmul(sa.get().transpose(-1, -2), g[0]), bs, bt);
      return TensorList{ga, gb};
    });
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = amp::cast_for_half_op(a_in), b = amp::cast_for_half_op(b_in);
  check_same_device("matmul", a, b);
  MG_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "matmul: expected tensors with at least one dim, got ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  if (a.dim() == 1 && b.dim() == 1) return batched_matmul(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (a.dim() == 1) return batched_matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return batched_matmul(a, b.unsqueeze(1)).squeeze(-1);
  if (b.dim() == 2 && a.dim() > 2) {  // fold a's batch into its rows: one large GEMM
    Shape s = a.shape();
    s.back() = b.size(1);
    return batched_matmul(a.reshape({-1, a.size(-1)}), b).view(s);
  }
  return batched_matmul(a, b);
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in) {
  Tensor x = amp::cast_for_half_op(x_in), w = amp::cast_for_half_op(w_in), bias = amp::cast_for_half_op(bias_in);
  OpScope scope(Op::linear);
  check_same_device("linear", x, w);
  MG_CHECK(w.dim() == 2, ShapeError, "linear: expected a 2-d weight [out, in], got ", shape_str(w.shape()));
  MG_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), ShapeError, "linear: expected input [..., ", w.size(1),
           "] for weight ", shape_str(w.shape()), ", got ", shape_str(x.shape()));
  MG_CHECK(x.dtype() == w.dtype(), DTypeError, "linear: expected input and weight of one dtype, got ", x.dtype(),
           " and ", w.dtype());
  const int64_t O = w.size(0), I = w.size(1);
  if (bias.defined()) {
    check_same_device("linear", x, bias);
    MG_CHECK(bias.shape() == Shape{O}, ShapeError, "linear: expected a bias of shape [", O, "], got ",
             shape_str(bias.shape()));
  }
  Shape os = x.shape();
  os.back() = O;
  int64_t rows = x.numel() / std::max<int64_t>(I, 1);
  Tensor out = new_output(os, x.dtype(), x.device());
  {
    NoGradGuard ng;
    Tensor out2 = out.view({1, rows, O});
    kernels::run(x.device(), &Backend::matmul, x.reshape({1, rows, I}), w.t().unsqueeze(0), out2);
    if (bias.defined())
      kernels::run(x.device(), &Backend::binary, kernels::BinaryOp::Add, out2, prepare(bias, x.dtype(), out2.shape()),
                   out2, 1.0);
  }
  count_flops(2.0 * double(rows) * double(I) * double(O));
  if (autograd::any_requires_grad({x, w, bias})) {
    SavedTensor sx(w.requires_grad() ? x : Tensor()), sw(x.requires_grad() ? w : Tensor());
    Shape xs = x.shape();
    autograd::record(Op::linear, {x, w, bias}, {out}, [=](const TensorList& g, const Node& n) {
      // The weight's gradient first: it reads the saved input, which a memory budget may have to
      // recompute, and the input's gradient (as large as the input) does not exist yet then.
      Tensor g2 = g[0].reshape({rows, O}), gx, gw, gb;
      if (n.needs_input_grad(1)) gw = matmul(g2.t(), sx.get().reshape({rows, I}));
      if (n.needs_input_grad(2)) gb = sum(g2, {0});
      if (n.needs_input_grad(0)) gx = matmul(g2, sw.get()).view(xs);
      return TensorList{gx, gw, gb};
    });
  }
  return out;
}

Tensor Tensor::matmul(const Tensor& o) const { return mg::matmul(*this, o); }

}  // namespace mg
