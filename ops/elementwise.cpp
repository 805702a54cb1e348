// Elementwise ops: unary maps, binary ops with broadcasting and type promotion, where,
// comparisons, the in-place forms, dropout and the fused bias_dropout_add.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include <memgrad/core/autocast.h>
#include <memgrad/core/random.h>
#include <memgrad/ops/op_util.h>

namespace mg {

using namespace detail;
using kernels::BinaryOp;
using kernels::UnaryOp;
using kernels::UnaryParams;

namespace {

enum class Keep { Nothing, Input, Output };  // what a unary op's backward needs

// grad * d op/dx by the formula of kernels/unary.h: in the kernel, or in ops on Tensors when the
// backward creates a graph (then the result is differentiable, through that same formula).
Tensor unary_grad(UnaryOp op, const Tensor& g, const Tensor& saved, UnaryParams p) {
  if (autograd::creating_graph())
    return kernels::with_unary_op(op, [&](auto u) { return kernels::unary_grad<decltype(u)::value>(g, saved, p); });
  Tensor gi = new_like(g);
  kernels::run(g.device(), &Backend::unary_backward, op, g, saved, gi, p);
  return gi;
}

// Float-only unary ops turn integer inputs into float32 first, as PyTorch does.
Tensor unary_op(Op id, UnaryOp op, const Tensor& x, Keep keep, bool float_only, UnaryParams p = {}) {
  OpScope scope(id);
  Tensor in = float_only && !is_floating(x.dtype()) ? prepare(x, kFloat32, x.shape()) : x;
  Tensor out = new_like(in);
  kernels::run(x.device(), &Backend::unary, op, in, out, p);
  if (autograd::any_requires_grad({x})) {
    SavedTensor saved(keep == Keep::Output ? out : keep == Keep::Input ? in : Tensor());
    autograd::record(id, {x}, {out}, [op, p, saved](const TensorList& g, const Node&) {
      return TensorList{unary_grad(op, g[0], saved.defined() ? saved.get() : g[0], p)};
    });
  }
  return out;
}

// Applies a unary op in place on `self` (which must not need its old value for backward).
Tensor& unary_inplace(Op id, UnaryOp op, Tensor& self, Keep keep, UnaryParams p = {}) {
  check_inplace(id, self, {});
  OpScope scope(id);
  bool record = autograd::any_requires_grad({self});
  SavedTensor before(record && keep == Keep::Input ? self.clone() : Tensor());
  kernels::run(self.device(), &Backend::unary, op, self, self, p);
  self.storage()->bump_version();
  if (record) {
    SavedTensor saved = keep == Keep::Output ? SavedTensor(self) : before;
    record_inplace(id, self, {self}, [op, p, saved](const TensorList& g, const Node&) {
      return TensorList{unary_grad(op, g[0], saved.defined() ? saved.get() : g[0], p)};
    });
  }
  return self;
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// Backward of a binary op: gradients w.r.t. a and b (each reduced to its own shape).
TensorList binary_grads(BinaryOp op, const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                        const Node& n) {
  Tensor ga, gb;
  bool need_a = n.needs_input_grad(0), need_b = n.needs_input_grad(1);
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
      if (need_a) ga = g;
      if (need_b) {  // g itself where b's factor is 1 (a + b): a copy costs a buffer and a pass at every residual
        const double s = op == BinaryOp::Add ? alpha : -alpha;
        gb = s == 1 ? g : g * s;
      }
      break;
    case BinaryOp::Mul:
      if (need_a) ga = g * b;
      if (need_b) gb = g * a;
      break;
    case BinaryOp::Div:
      if (need_a) ga = g / b;
      if (need_b) gb = -(g * a) / (b * b);
      break;
    case BinaryOp::Pow:
      if (need_a) ga = g * b * pow(a, b - 1.0);
      if (need_b) gb = where(a > 0.0, g * out * log(a), zeros_like(g));  // 0 where log(a) is undefined
      break;
    case BinaryOp::Max:
    case BinaryOp::Min: {
      Tensor pick_a = op == BinaryOp::Max ? a > b : a < b, tie = a == b;
      Tensor half = g * 0.5;
      if (need_a) ga = where(tie, half, where(pick_a, g, zeros_like(g)));
      if (need_b) gb = where(tie, half, where(pick_a, zeros_like(g), g));
      break;
    }
    default:
      break;
  }
  return {ga, gb};
}

bool backward_needs_operands(BinaryOp op) { return op != BinaryOp::Add && op != BinaryOp::Sub; }

Tensor binary_op(Op id, BinaryOp op, const Tensor& a, const Tensor& b, double alpha = 1) {
  const char* name = op_name(id);
  OpScope scope(id);
  check_same_device(name, a, b);
  DType ct = result_type(a, b);
  if ((op == BinaryOp::Div) && !is_floating(ct)) ct = kFloat32;  // true division
  Shape s = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor x = prepare(a, ct, s), y = prepare(b, ct, s);
  Tensor out = new_output(std::move(s), is_comparison(op) ? kBool : ct, a.device());
  kernels::run(a.device(), &Backend::binary, op, x, y, out, alpha);
  if (!is_comparison(op) && autograd::any_requires_grad({a, b})) {
    // Save only what the needed gradients use: mul needs b for a's gradient and a for b's.
    bool na = a.requires_grad(), nb = b.requires_grad(), keep = backward_needs_operands(op);
    bool keep_a = keep && (op == BinaryOp::Mul || op == BinaryOp::Div ? nb : true);
    bool keep_b = keep && (op == BinaryOp::Mul || op == BinaryOp::Pow ? na : true);
    SavedTensor sa(keep_a ? a.to(ct) : Tensor()), sb(keep_b ? b.to(ct) : Tensor());
    SavedTensor so(op == BinaryOp::Pow && nb ? out : Tensor());
    // An operand's shape is kept only when broadcast; otherwise it is the gradient's.
    auto shape_if_broadcast = [&](const Tensor& t) {
      return t.shape() == out.shape() ? std::nullopt : std::optional(t.shape());
    };
    DType at = a.dtype(), bt = b.dtype();
    autograd::record(id, {a, b}, {out},
                     [=, as = shape_if_broadcast(a), bs = shape_if_broadcast(b)](const TensorList& g, const Node& n) {
                       Tensor A = sa.defined() ? sa.get() : Tensor(), B = sb.defined() ? sb.get() : Tensor();
                       auto grads = binary_grads(op, g[0], A, B, so.defined() ? so.get() : Tensor(), alpha, n);
                       if (grads[0].defined()) grads[0] = grad_for(grads[0], as.value_or(g[0].shape()), at);
                       if (grads[1].defined()) grads[1] = grad_for(grads[1], bs.value_or(g[0].shape()), bt);
                       return grads;
                     });
  }
  return out;
}

// A scalar as a 0-d tensor of the dtype it takes next to a tensor of dtype `t`.
Tensor wrap(const Scalar& s, const Tensor& like) {
  NoGradGuard ng;
  MemoryScope scope(Category::Temporary);
  return scalar_tensor(s, TensorOptions().dtype(s.result_type_with(like.dtype())).device(like.device()));
}

// A unary op with a scalar operand, computed in the promoted dtype.
Tensor scalar_op(Op id, UnaryOp op, const Tensor& x, const Scalar& s, double a) {
  DType ct = s.result_type_with(x.dtype());
  Tensor in = ct == x.dtype() ? x : x.to(ct);
  return unary_op(id, op, in, op == UnaryOp::PowScalar ? Keep::Input : Keep::Nothing, false, {a, 0});
}

// In-place binary op: self = self op other, in self's dtype.
Tensor& binary_inplace(Op id, BinaryOp op, Tensor& self, const Tensor& other, double alpha = 1) {
  const char* name = op_name(id);
  check_inplace(id, self, {other});
  check_same_device(name, self, other);
  DType rt = result_type(self, other);
  if (op == BinaryOp::Div && !is_floating(rt)) rt = kFloat32;
  MG_CHECK(!(is_floating(rt) && !is_floating(self.dtype())), DTypeError, name, ": the result type ", rt,
           " cannot be stored in a tensor of dtype ", self.dtype());
  MG_CHECK(broadcast_shapes(self.shape(), other.shape(), name) == self.shape(), ShapeError, name,
           ": expected the other operand to broadcast to ", shape_str(self.shape()), ", got ",
           shape_str(other.shape()));
  OpScope scope(id);
  bool record = autograd::any_requires_grad({self, other});
  bool keep = record && backward_needs_operands(op);
  SavedTensor sa(keep ? self.clone() : Tensor()), sb(keep ? other.to(self.dtype()) : Tensor());
  kernels::run(self.device(), &Backend::binary, op, self, prepare(other, self.dtype(), self.shape()), self, alpha);
  self.storage()->bump_version();
  if (record) {
    Shape as = self.shape(), bs = other.shape();
    DType at = self.dtype(), bt = other.dtype();
    record_inplace(id, self, {self, other}, [=](const TensorList& g, const Node& n) {
      auto grads = binary_grads(op, g[0], sa.defined() ? sa.get() : Tensor(), sb.defined() ? sb.get() : Tensor(),
                                Tensor(), alpha, n);
      if (grads[0].defined()) grads[0] = grad_for(grads[0], as, at);
      if (grads[1].defined()) grads[1] = grad_for(grads[1], bs, bt);
      return grads;
    });
  }
  return self;
}

}  // namespace

// ---- unary
Tensor neg(const Tensor& x) { return unary_op(Op::neg, UnaryOp::Neg, x, Keep::Nothing, false); }
Tensor exp(const Tensor& x) { return unary_op(Op::exp, UnaryOp::Exp, amp::cast_for_float_op(x), Keep::Output, true); }
Tensor log(const Tensor& x) { return unary_op(Op::log, UnaryOp::Log, amp::cast_for_float_op(x), Keep::Input, true); }
Tensor sqrt(const Tensor& x) { return unary_op(Op::sqrt, UnaryOp::Sqrt, x, Keep::Output, true); }
Tensor rsqrt(const Tensor& x) { return unary_op(Op::rsqrt, UnaryOp::Rsqrt, x, Keep::Output, true); }
Tensor abs(const Tensor& x) { return unary_op(Op::abs, UnaryOp::Abs, x, Keep::Input, false); }
Tensor tanh(const Tensor& x) { return unary_op(Op::tanh, UnaryOp::Tanh, x, Keep::Output, true); }
Tensor sigmoid(const Tensor& x) { return unary_op(Op::sigmoid, UnaryOp::Sigmoid, x, Keep::Output, true); }
Tensor relu(const Tensor& x) { return unary_op(Op::relu, UnaryOp::Relu, x, Keep::Output, false); }
Tensor silu(const Tensor& x) { return unary_op(Op::silu, UnaryOp::Silu, x, Keep::Input, true); }
Tensor erf(const Tensor& x) { return unary_op(Op::erf, UnaryOp::Erf, x, Keep::Input, true); }
Tensor gelu(const Tensor& x, GeluApprox approx) {
  return approx == GeluApprox::Tanh ? unary_op(Op::gelu, UnaryOp::GeluTanh, x, Keep::Input, true)
                                    : unary_op(Op::gelu, UnaryOp::GeluErf, x, Keep::Input, true);
}

Tensor bias_gelu(const Tensor& x, const Tensor& bias, GeluApprox approx) {
  OpScope scope(Op::gelu);
  check_floating("bias_gelu", x);
  check_same_device("bias_gelu", x, bias);
  MG_CHECK(x.dim() >= 1 && bias.shape() == Shape{x.size(-1)}, ShapeError, "bias_gelu: expected a bias of shape [",
           x.dim() ? x.size(-1) : 0, "] for input ", shape_str(x.shape()), ", got ", shape_str(bias.shape()));
  const bool tanh = approx == GeluApprox::Tanh;
  Tensor out = new_like(x);
  kernels::run(x.device(), &Backend::bias_gelu, x, prepare(bias, x.dtype(), x.shape()), out, tanh);
  if (autograd::any_requires_grad({x, bias})) {
    SavedTensor sx(x), sb(bias);
    autograd::record(Op::gelu, {x, bias}, {out}, [=](const TensorList& g, const Node& node) {
      Tensor xs = sx.get(), b = sb.get(), gi;
      if (autograd::creating_graph()) {
        gi = unary_grad(tanh ? UnaryOp::GeluTanh : UnaryOp::GeluErf, g[0], xs + b, {});
      } else {
        gi = new_like(xs);
        kernels::run(xs.device(), &Backend::bias_gelu_backward, g[0], xs, prepare(b, xs.dtype(), xs.shape()), gi, tanh);
      }
      Tensor gb = node.needs_input_grad(1) ? grad_for(gi, b) : Tensor();
      return TensorList{node.needs_input_grad(0) ? gi : Tensor(), gb};
    });
  }
  return out;
}

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  MG_CHECK(lo || hi, ValueError, "clamp: expected at least one of min and max, got neither");
  // Bounds are kept inside the dtype's range: converting an out-of-range double to an integer is undefined.
  const DType t = x.dtype();
  double top = is_floating(t) ? DBL_MAX
               : t == kInt32  ? 2147483647.0
               : t == kUInt8  ? 255.0
               : t == kInt8   ? 127.0
                              : 9.2e18;
  double bottom = t == kInt32 ? -2147483648.0 : t == kUInt8 ? 0.0 : t == kInt8 ? -128.0 : -top;
  double a = lo ? std::clamp(lo->value, bottom, top) : bottom, b = hi ? std::clamp(hi->value, bottom, top) : top;
  return unary_op(Op::clamp, UnaryOp::Clamp, x, Keep::Input, false, {a, b});
}

Tensor pow(const Tensor& a, const Scalar& e) { return scalar_op(Op::pow, UnaryOp::PowScalar, a, e, e.value); }
Tensor add(const Tensor& a, const Scalar& b) { return scalar_op(Op::add, UnaryOp::AddScalar, a, b, b.value); }
Tensor sub(const Tensor& a, const Scalar& b) { return scalar_op(Op::sub, UnaryOp::AddScalar, a, b, -b.value); }
Tensor mul(const Tensor& a, const Scalar& b) { return scalar_op(Op::mul, UnaryOp::MulScalar, a, b, b.value); }
Tensor rsub(const Tensor& a, const Scalar& b) { return scalar_op(Op::rsub, UnaryOp::RsubScalar, a, b, b.value); }
Tensor div(const Tensor& a, const Scalar& b) {
  Scalar s(b.value);  // division is true division: the result is floating
  return scalar_op(Op::div, UnaryOp::MulScalar, a, s, 1.0 / b.value);
}

// ---- binary
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return binary_op(Op::add, BinaryOp::Add, a, b, alpha.value);
}
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return binary_op(Op::sub, BinaryOp::Sub, a, b, alpha.value);
}
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(Op::mul, BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(Op::div, BinaryOp::Div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(Op::pow, BinaryOp::Pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(Op::maximum, BinaryOp::Max, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(Op::minimum, BinaryOp::Min, a, b); }

Tensor eq(const Tensor& a, const Tensor& b) { return binary_op(Op::eq, BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_op(Op::ne, BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_op(Op::lt, BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_op(Op::le, BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_op(Op::gt, BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_op(Op::ge, BinaryOp::Ge, a, b); }
Tensor eq(const Tensor& a, const Scalar& b) { return eq(a, wrap(b, a)); }
Tensor ne(const Tensor& a, const Scalar& b) { return ne(a, wrap(b, a)); }
Tensor lt(const Tensor& a, const Scalar& b) { return lt(a, wrap(b, a)); }
Tensor le(const Tensor& a, const Scalar& b) { return le(a, wrap(b, a)); }
Tensor gt(const Tensor& a, const Scalar& b) { return gt(a, wrap(b, a)); }
Tensor ge(const Tensor& a, const Scalar& b) { return ge(a, wrap(b, a)); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  OpScope scope(Op::where);
  check_dtype("where", cond, kBool, "a condition");
  check_same_device("where", cond, a);
  check_same_device("where", a, b);
  DType ct = result_type(a, b);
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = new_output(s, ct, a.device());
  kernels::run(a.device(), &Backend::where, prepare(cond, kBool, s), prepare(a, ct, s), prepare(b, ct, s), out);
  if (autograd::any_requires_grad({a, b})) {
    SavedTensor sc(cond);
    Shape as = a.shape(), bs = b.shape();
    DType at = a.dtype(), bt = b.dtype();
    autograd::record(Op::where, {a, b}, {out}, [=](const TensorList& g, const Node& n) {
      Tensor c = sc.get(), z = zeros_like(g[0]);
      return TensorList{n.needs_input_grad(0) ? grad_for(where(c, g[0], z), as, at) : Tensor(),
                        n.needs_input_grad(1) ? grad_for(where(c, z, g[0]), bs, bt) : Tensor()};
    });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  check_dtype("masked_fill", mask, kBool, "a mask");
  MG_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), ShapeError,
           "masked_fill: expected a mask that broadcasts to ", shape_str(x.shape()), ", got ", shape_str(mask.shape()));
  Tensor v;
  {
    NoGradGuard ng;
    MemoryScope scope(Category::Temporary);
    v = scalar_tensor(value, TensorOptions().dtype(x.dtype()).device(x.device()));
  }
  return where(mask, v, x);
}

// ---- in-place
Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) {
  return binary_inplace(Op::add_, BinaryOp::Add, *this, o, alpha.value);
}
Tensor& Tensor::sub_(const Tensor& o) { return binary_inplace(Op::sub_, BinaryOp::Sub, *this, o); }
Tensor& Tensor::mul_(const Tensor& o) { return binary_inplace(Op::mul_, BinaryOp::Mul, *this, o); }
Tensor& Tensor::div_(const Tensor& o) { return binary_inplace(Op::div_, BinaryOp::Div, *this, o); }
Tensor& Tensor::add_(const Scalar& s) {
  return unary_inplace(Op::add_, UnaryOp::AddScalar, *this, Keep::Nothing, {s.value, 0});
}
Tensor& Tensor::mul_(const Scalar& s) {
  return unary_inplace(Op::mul_, UnaryOp::MulScalar, *this, Keep::Nothing, {s.value, 0});
}
Tensor& Tensor::div_(const Scalar& s) {
  MG_CHECK(is_floating(dtype()), DTypeError, "div_: the result type float32 cannot be stored in a tensor of dtype ",
           dtype());
  return unary_inplace(Op::div_, UnaryOp::MulScalar, *this, Keep::Nothing, {1.0 / s.value, 0});
}
Tensor& Tensor::relu_() { return unary_inplace(Op::relu_, UnaryOp::Relu, *this, Keep::Output); }
Tensor& Tensor::clamp_(const Scalar& lo, const Scalar& hi) {
  return unary_inplace(Op::clamp_, UnaryOp::Clamp, *this, Keep::Input, {lo.value, hi.value});
}
Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& v) {
  check_inplace(Op::masked_fill_, *this, {});
  check_dtype("masked_fill_", mask, kBool, "a mask");
  check_same_device("masked_fill_", *this, mask);
  MG_CHECK(broadcast_shapes(shape(), mask.shape(), "masked_fill_") == shape(), ShapeError,
           "masked_fill_: expected a mask that broadcasts to ", shape_str(shape()), ", got ", shape_str(mask.shape()));
  OpScope scope(Op::masked_fill_);
  Tensor value = full({}, v, TensorOptions().dtype(dtype()).device(device()));
  kernels::run(device(), &Backend::where, prepare(mask, kBool, shape()), value.expand(shape()), *this, *this);
  storage()->bump_version();
  SavedTensor sm(autograd::any_requires_grad({*this}) ? mask : Tensor());
  record_inplace(Op::masked_fill_, *this, {*this}, [sm](const TensorList& g, const Node&) {
    return TensorList{where(sm.get(), zeros_like(g[0]), g[0])};
  });
  return *this;
}

// ---- Tensor method forms
Tensor Tensor::exp() const { return mg::exp(*this); }
Tensor Tensor::log() const { return mg::log(*this); }
Tensor Tensor::sqrt() const { return mg::sqrt(*this); }
Tensor Tensor::abs() const { return mg::abs(*this); }
Tensor Tensor::neg() const { return mg::neg(*this); }
Tensor Tensor::tanh() const { return mg::tanh(*this); }
Tensor Tensor::sigmoid() const { return mg::sigmoid(*this); }
Tensor Tensor::relu() const { return mg::relu(*this); }
Tensor Tensor::pow(const Scalar& p) const { return mg::pow(*this, p); }

// ---- dropout (the elementwise kernels draw its mask)

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

}  // namespace mg
