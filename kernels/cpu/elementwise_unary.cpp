// Elementwise CPU kernels, unary maps: out = op(x), and gelu with its bias add fused.
// (elementwise.cpp holds copies, fills and dropout; elementwise_binary.cpp and
// elementwise_unary_backward.cpp the rest of the family.) Loops for float32/float16/bfloat16 at every
// level, for other dtypes at the baseline's (cpu_kernels.h).
#include <cmath>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>
#include <memgrad/kernels/unary.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

// Calls k(formula) with op's formula over the arithmetic type A, and returns what k returns.
template <class A, class K>
auto with_formula(UnaryOp op, UnaryParams p, K&& k) {
  const A a = kernels::scalar_as<A>(p.a), b = kernels::scalar_as<A>(p.b);
  switch (op) {
    case UnaryOp::Neg:
      return k([](A v) { return -v; });
    case UnaryOp::Exp:
      return k([](A v) { return std::exp(v); });
    case UnaryOp::Log:
      return k([](A v) { return std::log(v); });
    case UnaryOp::Sqrt:
      return k([](A v) { return std::sqrt(v); });
    case UnaryOp::Rsqrt:
      return k([](A v) { return A(1) / std::sqrt(v); });
    case UnaryOp::Abs:
      return k([](A v) { return v < A(0) ? -v : v; });
    case UnaryOp::Tanh:
      return k([](A v) { return std::tanh(v); });
    case UnaryOp::Sigmoid:
      return k([](A v) { return kernels::sigmoid_f(v); });
    case UnaryOp::Relu:
      return k([](A v) { return v > A(0) ? v : A(0); });
    case UnaryOp::GeluErf:
      return k([](A v) { return kernels::gelu_erf_f(v); });
    case UnaryOp::GeluTanh:
      return k([](A v) { return kernels::gelu_tanh_f(v); });
    case UnaryOp::Silu:
      return k([](A v) { return kernels::silu_f(v); });
    case UnaryOp::Erf:
      return k([](A v) { return std::erf(v); });
    case UnaryOp::PowScalar:
      return k([e = p.a](A v) { return A(std::pow(v, e)); });
    case UnaryOp::Clamp:
      return k([a, b](A v) { return v < a ? a : (v > b ? b : v); });
    case UnaryOp::AddScalar:
      return k([a](A v) { return v + a; });
    case UnaryOp::MulScalar:
      return k([a](A v) { return v * a; });
    case UnaryOp::RsubScalar:
      return k([a](A v) { return a - v; });
  }
  return k([](A v) { return -v; });
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Out& out, UnaryParams p) {
  MG_CPU_LOWER_UNLESS(level_has(x.dtype()), unary, op, x, out, p);
  dispatch_level(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = std::conditional_t<std::is_same_v<T, bool>, int64_t, opmath_t<T>>;
    if constexpr (std::is_integral_v<T>) {
      // Integers and bool: one loop, the formula picked per element and its value stored as a loop
      // of its own would store it. No such loop is hot (ops/ sends them the arithmetic ops only),
      // and one loop per formula and dtype was most of this file's compile time.
      map<T, T>(
          out, [op, p](T v) { return with_formula<A>(op, p, [v](auto f) { return store<T>(f(A(v))); }); }, x);
    } else {
      with_formula<A>(op, p, [&](auto f) {  // a loop per formula, picked once
        map<T, T>(
            out, [f](auto v) { return f(A(v)); }, x);
      });
    }
  });
}

void bias_gelu(const Tensor& x, const Tensor& bias, const Out& out, bool tanh) {
  MG_CPU_LOWER_UNLESS(level_has(x.dtype()), bias_gelu, x, bias, out, tanh);
  dispatch_floating_level(x.dtype(), "bias_gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    if (tanh)
      map<T, T, T>(
          out, [](A v, A b) { return kernels::gelu_tanh_f(v + b); }, x, bias);
    else
      map<T, T, T>(
          out, [](A v, A b) { return kernels::gelu_erf_f(v + b); }, x, bias);
  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
