// Elementwise CPU kernels, binary maps: out = a op b (comparisons write bool). Loops for
// float32/float16/bfloat16 at every level, for other dtypes at the baseline's (cpu_kernels.h).
#include <cmath>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

// Calls k(formula) with op's formula over the arithmetic type A (alpha scales b in Add and Sub;
// the comparisons' formulas return bool), and returns what k returns.
template <class A, class K>
auto with_formula(BinaryOp op, A al, K&& k) {
  switch (op) {
    case BinaryOp::Add:
      return k([al](A u, A v) { return u + al * v; });
    case BinaryOp::Sub:
      return k([al](A u, A v) { return u - al * v; });
    case BinaryOp::Mul:
      return k([](A u, A v) { return u * v; });
    case BinaryOp::Div:
      return k([](A u, A v) { return u / v; });
    case BinaryOp::Pow:
      return k([](A u, A v) { return A(std::pow(u, v)); });
    case BinaryOp::Max:
      return k([](A u, A v) { return is_nan(u) ? u : (u > v ? u : v); });
    case BinaryOp::Min:
      return k([](A u, A v) { return is_nan(u) ? u : (u < v ? u : v); });
    case BinaryOp::Eq:
      return k([](A u, A v) { return u == v; });
    case BinaryOp::Ne:
      return k([](A u, A v) { return u != v; });
    case BinaryOp::Lt:
      return k([](A u, A v) { return u < v; });
    case BinaryOp::Le:
      return k([](A u, A v) { return u <= v; });
    case BinaryOp::Gt:
      return k([](A u, A v) { return u > v; });
    case BinaryOp::Ge:
      return k([](A u, A v) { return u >= v; });
  }
  return k([](A u, A v) { return u == v; });
}

}  // namespace

void binary(BinaryOp op, const Tensor& x, const Tensor& y, const Out& out, double alpha) {
  MG_CPU_LOWER_UNLESS(level_has(x.dtype()), binary, op, x, y, out, alpha);
  dispatch_level(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = std::conditional_t<std::is_same_v<T, bool>, int64_t, opmath_t<T>>;
    const A al = kernels::scalar_as<A>(alpha);
    const bool compare = op >= BinaryOp::Eq;  // comparisons write bool
    if constexpr (std::is_integral_v<T>) {
      // Integers and bool: one loop per output type, the formula picked per element and its value
      // stored as a loop of its own would store it (as in unary, elementwise_unary.cpp).
      auto value = [op, al](auto stored, T u, T v) {
        return with_formula<A>(op, al, [&](auto f) { return store<decltype(stored)>(f(A(u), A(v))); });
      };
      if (compare)
        map<bool, T, T>(
            out, [value](T u, T v) { return value(false, u, v); }, x, y);
      else
        map<T, T, T>(
            out, [value](T u, T v) { return value(T(), u, v); }, x, y);
    } else {
      with_formula<A>(op, al, [&](auto f) {  // a loop per formula, picked once
        using R = decltype(f(A(), A()));
        if constexpr (std::is_same_v<R, bool>)
          map<bool, T, T>(
              out, [f](auto u, auto v) { return f(A(u), A(v)); }, x, y);
        else
          map<T, T, T>(
              out, [f](auto u, auto v) { return f(A(u), A(v)); }, x, y);
      });
    }
  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
