// Layer norm over the rows of a contiguous [rows, n] view, and batch norm per channel of a contiguous
// [N, C, S] view; forward and backward.
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

namespace {
// Statistics are float32, float64 for float64 inputs.
template <class T>
using StatT = std::conditional_t<std::is_same_v<T, double>, double, float>;
}  // namespace

void batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
                const Tensor& var, const Tensor& rstd, bool training, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  dispatch_floating(x.dtype(), "batch_norm", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using St = StatT<T>;
    const T* xp = ptr<T>(x);
    const T* wp = weight.defined() ? ptr<T>(weight) : nullptr;
    const T* bp = bias.defined() ? ptr<T>(bias) : nullptr;
    T* yp = ptr<T>(out);
    St *mp = ptr<St>(mean), *vp = ptr<St>(var), *rp = ptr<St>(rstd);
#pragma omp parallel for if (N * C * S >= kParallelGrain)
    for (int64_t c = 0; c < C; ++c) {
      double mu = double(mp[c]), v = double(vp[c]);
      if (training) {  // two passes in double: the mean, then the squared deviations from it
        double s = 0, ss = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < S; ++i) s += double(load(xp[(n * C + c) * S + i]));
        mu = s / double(N * S);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < S; ++i) {
            const double d = double(load(xp[(n * C + c) * S + i])) - mu;
            ss += d * d;
          }
        v = ss / double(N * S);
        mp[c] = St(mu), vp[c] = St(v);
      }
      const double rs = 1.0 / std::sqrt(v + eps);
      rp[c] = St(rs);
      const double scale = rs * (wp ? double(load(wp[c])) : 1.0), shift = bp ? double(load(bp[c])) : 0.0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t k = (n * C + c) * S + i;
          yp[k] = store<T>((double(load(xp[k])) - mu) * scale + shift);
        }
    }
  });
}

void batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                         bool training) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using St = StatT<T>;
    const T *xp = ptr<T>(x), *gp = ptr<T>(grad);
    const T* wp = weight.defined() ? ptr<T>(weight) : nullptr;
    const St *mp = ptr<St>(mean), *rp = ptr<St>(rstd);
    T* gxp = grad_x.defined() ? ptr<T>(grad_x) : nullptr;
    T* gwp = grad_weight.defined() ? ptr<T>(grad_weight) : nullptr;
    T* gbp = grad_bias.defined() ? ptr<T>(grad_bias) : nullptr;
#pragma omp parallel for if (N * C * S >= kParallelGrain)
    for (int64_t c = 0; c < C; ++c) {
      const double mu = double(mp[c]), rs = double(rp[c]);
      double sum_g = 0, sum_gx = 0;  // sum(grad), sum(grad * xhat)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t k = (n * C + c) * S + i;
          const double g = double(load(gp[k]));
          sum_g += g;
          sum_gx += g * (double(load(xp[k])) - mu) * rs;
        }
      if (gwp) gwp[c] = store<T>(sum_gx);
      if (gbp) gbp[c] = store<T>(sum_g);
      if (!gxp) continue;
      const double m = double(N * S), scale = rs * (wp ? double(load(wp[c])) : 1.0);
      const double mean_g = training ? sum_g / m : 0.0, mean_gx = training ? sum_gx / m : 0.0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t k = (n * C + c) * S + i;
          const double xh = (double(load(xp[k])) - mu) * rs;
          gxp[k] = store<T>(scale * (double(load(gp[k])) - mean_g - xh * mean_gx));
        }
    }
  });
}

}  // namespace mg::cpu
