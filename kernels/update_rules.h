// Optimizer update rules for one element, shared by the CPU loop (kernels/cpu/multi_tensor.cpp)
// and the fused multi-tensor CUDA kernel (kernels/cuda/multi_tensor.cu).
// They follow torch.optim's single-tensor formulas operation by operation (PyTorch 1.13), so
// results match it to rounding. `T` is the arithmetic type (float for half parameters).
#pragma once
#include <memgrad/kernels/host_device.h>

namespace mg::kernels::rules {

MG_HD float sqrt_of(float x) { return ::sqrtf(x); }  // global: mg::sqrt (a tensor op) would hide it
MG_HD double sqrt_of(double x) { return ::sqrt(x); }

struct SGDScalars {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, first_step;  // first_step: the momentum buffer starts as the gradient
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
};
// Updates p, the moments m and v, and vmax when amsgrad.
template <class T>
MG_HD void adam(T& p, T g, T& m, T& v, T& vmax, const AdamScalars& s) {
  if (s.maximize) g = -g;
  if (s.decoupled)
    p = p * T(1 - s.lr * s.weight_decay);
  else if (s.weight_decay != 0)
    g = g + p * T(s.weight_decay);
  m = m * T(s.beta1) + g * T(1 - s.beta1);
  v = v * T(s.beta2) + T(1 - s.beta2) * g * g;
  T second = v;
  if (s.amsgrad) second = vmax = vmax > v ? vmax : v;
  T denom = sqrt_of(second) / T(s.bias_correction2_sqrt) + T(s.eps);
  p = p + T(-s.step_size) * (m / denom);
}

}  // namespace mg::kernels::rules
