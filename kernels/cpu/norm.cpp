// Layer norm over the rows of a contiguous [rows, n] view, forward and backward.
#include <algorithm>
#include <cmath>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu {

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
                const Tensor& rstd, double eps) {
  const int64_t n = x.size(-1 + x.dim()), rows = x.numel() / std::max<int64_t>(n, 1);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T* xp = ptr<T>(x);
    const T* wp = weight.defined() ? ptr<T>(weight) : nullptr;
    const T* bp = bias.defined() ? ptr<T>(bias) : nullptr;
    T* yp = ptr<T>(out);
    A *mp = ptr<A>(mean), *rp = ptr<A>(rstd);
#pragma omp parallel for if (rows * n >= kParallelGrain)
    for (int64_t i = 0; i < rows; ++i) {
      const T* row = xp + i * n;
      double s = 0, ss = 0;
      for (int64_t j = 0; j < n; ++j) s += double(load(row[j]));
      double mu = s / double(n);
      for (int64_t j = 0; j < n; ++j) {
        double d = double(load(row[j])) - mu;
        ss += d * d;
      }
      double rs = 1.0 / std::sqrt(ss / double(n) + eps);
      mp[i] = A(mu);
      rp[i] = A(rs);
      for (int64_t j = 0; j < n; ++j) {
        A v = A((double(load(row[j])) - mu) * rs);
        if (wp) v *= load(wp[j]);
        if (bp) v += load(bp[j]);
        yp[i * n + j] = store<T>(v);
      }
    }
  });
}

void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / std::max<int64_t>(n, 1);
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T *xp = ptr<T>(x), *gp = ptr<T>(grad);
    const T* wp = weight.defined() ? ptr<T>(weight) : nullptr;
    const opmath_t<T>*mp = ptr<opmath_t<T>>(mean), *rp = ptr<opmath_t<T>>(rstd);
    if (grad_x.defined()) {
      T* gxp = ptr<T>(grad_x);
#pragma omp parallel for if (rows * n >= kParallelGrain)
      for (int64_t i = 0; i < rows; ++i) {
        const T *row = xp + i * n, *grow = gp + i * n;
        double mu = mp[i], rs = rp[i], sum_g = 0, sum_gx = 0;
        for (int64_t j = 0; j < n; ++j) {
          double g = double(load(grow[j])) * (wp ? double(load(wp[j])) : 1.0);
          sum_g += g;
          sum_gx += g * (double(load(row[j])) - mu) * rs;
        }
        sum_g /= double(n);
        sum_gx /= double(n);
        for (int64_t j = 0; j < n; ++j) {
          double g = double(load(grow[j])) * (wp ? double(load(wp[j])) : 1.0);
          double xh = (double(load(row[j])) - mu) * rs;
          gxp[i * n + j] = store<T>(rs * (g - sum_g - xh * sum_gx));
        }
      }
    }
    T* gwp = grad_weight.defined() ? ptr<T>(grad_weight) : nullptr;
    T* gbp = grad_bias.defined() ? ptr<T>(grad_bias) : nullptr;
    if (!gwp && !gbp) return;
#pragma omp parallel for if (rows * n >= kParallelGrain)
    for (int64_t j = 0; j < n; ++j) {
      double sw = 0, sb = 0;
      for (int64_t i = 0; i < rows; ++i) {
        double g = double(load(gp[i * n + j]));
        sw += g * (double(load(xp[i * n + j])) - double(mp[i])) * double(rp[i]);
        sb += g;
      }
      if (gwp) gwp[j] = store<T>(sw);
      if (gbp) gbp[j] = store<T>(sb);
    }
  });
}

}  // namespace mg::cpu
