// Optimizer update rules for one element, shared by the CPU loop (kernels/cpu/multi_tensor.cpp)
// and the fused multi-tensor CUDA kernel (kernels/cuda/multi_tensor.cu).
// They follow torch.optim's single-tensor formulas operation by operation (PyTorch 1.13), so
// results match it to rounding. `T` is the arithmetic type (float for half parameters).
#pragma once
#include <memgrad/kernels/host_device.h>

namespace mg::kernels::rules {

MG_HD float sqrt_of(float x) { return ::sqrtf(x); }  // global: mg::sqrt (a tensor op) would hide it
MG_HD double sqrt_of(double x) { return ::sqrt(x); }

// What a step multiplies a float32 parameter's half gradient by as it reads it (mixed precision
// without a float32 copy of the gradients, as apex's FusedAdam): the loss scaler's 1/scale, then
// clipping's coefficient, each product rounded to float32, as a float32 copy of the gradient
// scaled in place by mul_ would be (a factor of 1 changes nothing). Gradients of the parameter's own
// dtype are read as they are.
struct GradFactors {
  float first = 1.0f, second = 1.0f;
};
template <class T>
MG_HD T scaled_grad(T g, const GradFactors& f) {
  const T once = g * T(f.first);
  return once * T(f.second);
}

struct SGDScalars {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, first_step;  // first_step: the momentum buffer starts as the gradient
  GradFactors grad{};                   // half gradients of float32 parameters
};
// Updates p (and buf when momentum != 0).
// PyTorch's `a.add(b, alpha)` is one fused multiply-add on CPU; so is each step here.
template <class T>
MG_HD void sgd(T& p, T g, T& buf, const SGDScalars& s) {
  T d = s.maximize ? -g : g;
  if (s.weight_decay != 0) d = fma(p, T(s.weight_decay), d);
  if (s.momentum != 0) {
    buf = s.first_step ? d : fma(d, T(1 - s.dampening), buf * T(s.momentum));
    d = s.nesterov ? fma(buf, T(s.momentum), d) : buf;
  }
  p = fma(d, T(-s.lr), p);
}

struct AdamScalars {
  double lr, beta1, beta2, eps, weight_decay;
  double step_size;                   // lr / (1 - beta1^t)
  double bias_correction2_sqrt;       // sqrt(1 - beta2^t)
  bool amsgrad, maximize, decoupled;  // decoupled: AdamW's decay p *= 1 - lr * wd
  GradFactors grad{};                 // half gradients of float32 parameters
};
// AdamScalars converted to the arithmetic type once per tensor, so the element loop has no
// conversions or branches (the CPU loop vectorizes; the CUDA kernel converts per element).
template <class T>
struct AdamCoeffs {
  T decay, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
  bool maximize, decoupled, l2;
  MG_HD explicit AdamCoeffs(const AdamScalars& s)
      : decay(T(1 - s.lr * s.weight_decay)),
        weight_decay(T(s.weight_decay)),
        beta1(T(s.beta1)),
        one_minus_beta1(T(1 - s.beta1)),
        beta2(T(s.beta2)),
        one_minus_beta2(T(1 - s.beta2)),
        bias_correction2_sqrt(T(s.bias_correction2_sqrt)),
        eps(T(s.eps)),
        neg_step_size(T(-s.step_size)),
        maximize(s.maximize),
        decoupled(s.decoupled),
        l2(!s.decoupled && s.weight_decay != 0) {}
};
// Updates p and the moments m and v; vmax too when Amsgrad. The flags pick values, never
// branch around arithmetic, so a loop over elements vectorizes.
template <class T, bool Amsgrad>
MG_HD void adam(T& p, T g, T& m, T& v, T& vmax, const AdamCoeffs<T>& c) {
  g = c.maximize ? -g : g;
  p = c.decoupled ? p * c.decay : p;
  g = c.l2 ? g + p * c.weight_decay : g;
  m = m * c.beta1 + g * c.one_minus_beta1;
  v = v * c.beta2 + c.one_minus_beta2 * g * g;
  T second = v;
  if constexpr (Amsgrad) second = vmax = vmax > v ? vmax : v;
  T denom = sqrt_of(second) / c.bias_correction2_sqrt + c.eps;
  p = p + c.neg_step_size * (m / denom);
}
template <class T>
MG_HD void adam(T& p, T g, T& m, T& v, T& vmax, const AdamScalars& s) {
  const AdamCoeffs<T> c(s);
  if (s.amsgrad)
    adam<T, true>(p, g, m, v, vmax, c);
  else
    adam<T, false>(p, g, m, v, vmax, c);
}

struct LionScalars {
  double lr, beta1, beta2, weight_decay;
  bool maximize;
};
// LionScalars in the arithmetic type, once per tensor (as AdamCoeffs).
template <class T>
struct LionCoeffs {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_lr;
  bool maximize;
  MG_HD explicit LionCoeffs(const LionScalars& s)
      : decay(T(1 - s.lr * s.weight_decay)),
        beta1(T(s.beta1)),
        one_minus_beta1(T(1 - s.beta1)),
        beta2(T(s.beta2)),
        one_minus_beta2(T(1 - s.beta2)),
        neg_lr(T(-s.lr)),
        maximize(s.maximize) {}
};
// Updates p and the momentum m as lion-pytorch: the decoupled decay, then a step of lr against the
// sign of beta1 * m + (1 - beta1) * g (torch.sign: 0 at 0 and for NaN), then m moves towards g by
// 1 - beta2. Each `a.mul_(x).add_(b, alpha)` is one explicit fma, as in sgd: the sign of a sum that
// nearly cancels must not depend on whether a compiler contracts it (nvcc does, a host loop may not).
template <class T>
MG_HD void lion(T& p, T g, T& m, const LionCoeffs<T>& c) {
  g = c.maximize ? -g : g;
  const T u = fma(g, c.one_minus_beta1, m * c.beta1);
  p = fma(T(u > T(0)) - T(u < T(0)), c.neg_lr, p * c.decay);
  m = fma(g, c.one_minus_beta2, m * c.beta2);
}

}  // namespace mg::kernels::rules
