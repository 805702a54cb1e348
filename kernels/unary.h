// The unary ops' formulas and derivatives, written once. The CPU and CUDA kernels instantiate them
// with numbers; a backward pass that creates a graph (ops/elementwise.cpp) instantiates the
// derivatives with Tensors, so the gradient of a gradient follows the very formula the kernels run.
#pragma once
#include <cstdint>
#include <type_traits>

#include <memgrad/kernels/host_device.h>

namespace mg {
class Tensor;
}

namespace mg::kernels {

// Every unary op, listed once (the enum, the dispatch below). PowScalar is x ^ a, Clamp clamps to
// [a, b], AddScalar is x + a, MulScalar x * a, RsubScalar a - x (a, b: UnaryParams).
#define MG_UNARY_OPS(X) \
  X(Neg)                \
  X(Exp)                \
  X(Log)                \
  X(Sqrt)               \
  X(Rsqrt)              \
  X(Abs)                \
  X(Tanh)               \
  X(Sigmoid)            \
  X(Relu)               \
  X(GeluErf)            \
  X(GeluTanh)           \
  X(Silu)               \
  X(Erf)                \
  X(PowScalar)          \
  X(Clamp)              \
  X(AddScalar)          \
  X(MulScalar)          \
  X(RsubScalar)

enum class UnaryOp : uint8_t {
#define MG_UNARY_ENUM(name) name,
  MG_UNARY_OPS(MG_UNARY_ENUM)
#undef MG_UNARY_ENUM
};
// Scalar parameters of a unary op (exponent, clamp bounds, ...).
struct UnaryParams {
  double a = 0, b = 0;
};

// A unary op as a type, for formulas selected at compile time.
template <UnaryOp op>
struct UnaryTag {
  static constexpr UnaryOp value = op;
};
// Calls f(UnaryTag<op>{}) for the runtime `op`.
template <class F>
MG_HD auto with_unary_op(UnaryOp op, F&& f) -> decltype(f(UnaryTag<UnaryOp::Neg>{})) {
  switch (op) {
#define MG_UNARY_CASE(name) \
  case UnaryOp::name:       \
    return f(UnaryTag<UnaryOp::name>{});
    MG_UNARY_OPS(MG_UNARY_CASE)
#undef MG_UNARY_CASE
  }
  return f(UnaryTag<UnaryOp::Neg>{});
}

// ---- the vocabulary of the formulas: numbers here; Tensors bring mg::exp, mg::where, ... (found by
// argument-dependent lookup)

// A constant next to a value of type V: V itself for numbers, a double (a Scalar) for Tensors.
template <class V>
struct Num {
  using type = V;
};
template <>
struct Num<Tensor> {
  using type = double;
};
template <class V>
MG_HD typename Num<V>::type num(double v) {
  return typename Num<V>::type(v);
}
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
MG_HD T where(bool c, T a, T b) {
  return c ? a : b;
}
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
MG_HD T zeros_like(T) {
  return T(0);
}

#if !defined(__CUDA_ARCH__)
// On the host, unqualified exp/erf/tanh would find only C's double versions: float math would
// run in double, several times slower. The device pass has its own float overloads.
using std::erf;
using std::exp;
using std::pow;
using std::tanh;
#endif

// ---- activation formulas (forward, and derivative w.r.t. the input)

// tanh inside the activation formulas. For float on the host it is Eigen's branch-free 13/6
// rational approximation (generic_fast_tanh_float: a couple of ulps on [-8, 8], +-1 beyond), so
// loops over it vectorize: libm's scalar tanhf took a fifth of a small GPT's training step.
template <class V>
MG_HD V act_tanh(const V& x) {
  return tanh(x);
}
#if !defined(__CUDACC__)
template <>
inline float act_tanh(const float& a) {
  const float x = a < -7.99881172f ? -7.99881172f : (a > 7.99881172f ? 7.99881172f : a), x2 = x * x;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = x2 * p + -8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  const float t = (a < 0.0004f && a > -0.0004f) ? a : x * p / q;     // tanh(x) ~ x near 0
  return a >= 7.99881172f ? 1.0f : (a <= -7.99881172f ? -1.0f : t);  // exactly +-1 past the clamp
}
#endif
template <class V>
MG_HD V sigmoid_f(const V& x) {
  return num<V>(1) / (num<V>(1) + exp(-x));
}
template <class V>
MG_HD V gelu_erf_f(const V& x) {
  return num<V>(0.5) * x * (num<V>(1) + erf(x * num<V>(0.7071067811865476)));
}
template <class V>
MG_HD V gelu_erf_grad(const V& x) {
  V cdf = num<V>(0.5) * (num<V>(1) + erf(x * num<V>(0.7071067811865476)));
  V pdf = exp(num<V>(-0.5) * x * x) * num<V>(0.3989422804014327);
  return cdf + x * pdf;
}
template <class V>
MG_HD V gelu_tanh_f(const V& x) {
  return num<V>(0.5) * x * (num<V>(1) + act_tanh(num<V>(0.7978845608028654) * (x + num<V>(0.044715) * x * x * x)));
}
template <class V>
MG_HD V gelu_tanh_grad(const V& x) {
  const auto k = num<V>(0.7978845608028654), c = num<V>(0.044715);
  V th = act_tanh(k * (x + c * x * x * x));
  return num<V>(0.5) * (num<V>(1) + th) +
         num<V>(0.5) * x * (num<V>(1) - th * th) * k * (num<V>(1) + num<V>(3) * c * x * x);
}
template <class V>
MG_HD V silu_f(const V& x) {
  return x * sigmoid_f(x);
}
template <class V>
MG_HD V silu_grad(const V& x) {
  V s = sigmoid_f(x);
  return s * (num<V>(1) + x * (num<V>(1) - s));
}

// grad * d op(x)/dx, from `s`: the input x, or the output y for Exp, Sqrt, Rsqrt, Tanh, Sigmoid
// and Relu (what the op keeps for backward).
template <UnaryOp op, class V>
MG_HD V unary_grad(const V& g, const V& s, UnaryParams p) {
  if constexpr (op == UnaryOp::Neg || op == UnaryOp::RsubScalar) {
    return -g;
  } else if constexpr (op == UnaryOp::Exp) {
    return g * s;
  } else if constexpr (op == UnaryOp::Log) {
    return g / s;
  } else if constexpr (op == UnaryOp::Sqrt) {
    return g / (num<V>(2) * s);
  } else if constexpr (op == UnaryOp::Rsqrt) {
    return num<V>(-0.5) * g * s * s * s;
  } else if constexpr (op == UnaryOp::Abs) {
    return where(s > num<V>(0), g, where(s < num<V>(0), -g, zeros_like(g)));
  } else if constexpr (op == UnaryOp::Tanh) {
    return g * (num<V>(1) - s * s);
  } else if constexpr (op == UnaryOp::Sigmoid) {
    return g * s * (num<V>(1) - s);
  } else if constexpr (op == UnaryOp::Relu) {
    return where(s > num<V>(0), g, zeros_like(g));
  } else if constexpr (op == UnaryOp::GeluErf) {
    return g * gelu_erf_grad(s);
  } else if constexpr (op == UnaryOp::GeluTanh) {
    return g * gelu_tanh_grad(s);
  } else if constexpr (op == UnaryOp::Silu) {
    return g * silu_grad(s);
  } else if constexpr (op == UnaryOp::Erf) {  // 2 / sqrt(pi) exp(-x^2)
    return g * num<V>(1.1283791670955126) * exp(-(s * s));
  } else if constexpr (op == UnaryOp::PowScalar) {  // in double for numbers, as the forward
    return p.a == 0 ? zeros_like(g) : V(g * p.a * pow(s, p.a - 1));
  } else if constexpr (op == UnaryOp::Clamp) {
    return where(s >= num<V>(p.a), where(s <= num<V>(p.b), g, zeros_like(g)), zeros_like(g));
  } else if constexpr (op == UnaryOp::AddScalar) {
    return g;
  } else {
    static_assert(op == UnaryOp::MulScalar, "every unary op has a derivative");
    return g * num<V>(p.a);
  }
}

}  // namespace mg::kernels
