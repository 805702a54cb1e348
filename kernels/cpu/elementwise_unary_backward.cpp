// Elementwise CPU kernels, the unary maps' backward: grad_in = grad * op'(saved), and the fused
// bias + gelu's. Loops for float32/float16/bfloat16 at every level, float64 at the baseline's
// (cpu_kernels.h).
#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>
#include <memgrad/kernels/unary.h>

namespace mg::cpu::MG_CPU_ISA_NS {

void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& saved, const Out& grad_in, UnaryParams p) {
  MG_CPU_LOWER_UNLESS(level_has(grad.dtype()), unary_backward, op, grad, saved, grad_in, p);
  dispatch_floating_level(grad.dtype(), "unary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    kernels::with_unary_op(op, [&](auto u) {  // the formula is picked once, outside the loop
      constexpr UnaryOp o = decltype(u)::value;
      map<T, T, T>(
          grad_in, [p](A g, A s) { return kernels::unary_grad<o>(g, s, p); }, grad, saved);
    });
  });
}

void bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias, const Out& grad_in, bool tanh) {
  MG_CPU_LOWER_UNLESS(level_has(x.dtype()), bias_gelu_backward, grad, x, bias, grad_in, tanh);
  dispatch_floating_level(x.dtype(), "bias_gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    if (tanh)
      map<T, T, T, T>(
          grad_in, [](A g, A v, A b) { return g * kernels::gelu_tanh_grad(v + b); }, grad, x, bias);
    else
      map<T, T, T, T>(
          grad_in, [](A g, A v, A b) { return g * kernels::gelu_erf_grad(v + b); }, grad, x, bias);
  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
