// Layer norm and RMS norm over the rows of a contiguous [rows, n] view, and batch norm per channel of
// a contiguous [N, C, S] view; forward and backward. RMS norm is layer norm without centering
// (kCenter false: the mean taken as 0, no bias), so both run the same loops.
#include <algorithm>
#include <cmath>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

// Calls f(std::bool_constant<W>, std::bool_constant<B>) for whether weight and bias exist: one
// loop each, so no loop branches on them.
template <class F>
void with_affine(bool w, bool b, F f) {
  using Y = std::true_type;
  using N = std::false_type;
  if (w)
    b ? f(Y{}, Y{}) : f(Y{}, N{});
  else
    b ? f(N{}, Y{}) : f(N{}, N{});
}

// Normalizes the row x[0, n) into y in SIMD lanes: the mean (kCenter; else 0), then the variance as
// the mean squared deviation from it (two passes, each a blocked sum: float lanes within blocks,
// blocks in double). The sums' lambdas capture by value (blocked_sum, loops.h): by reference, GCC 12
// gathered x.
template <bool kCenter, class T, class A, class W, class B>
void layer_norm_row(const T* x, const T* w, const T* b, T* y, int64_t n, double eps, A& mean, A& rstd, W, B) {
  const A mu = kCenter ? A(blocked_sum<A>(n, [=](int64_t j) { return A(load(x[j])); }) / double(n)) : A(0);
  const double var = blocked_sum<A>(n,
                                    [=](int64_t j) {
                                      const A d = A(load(x[j])) - mu;
                                      return d * d;
                                    }) /
                     double(n);
  const A rs = A(1.0 / std::sqrt(var + eps));
  mean = mu, rstd = rs;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    A v = (A(load(x[j])) - mu) * rs;
    if constexpr (W::value) v *= A(load(w[j]));
    if constexpr (B::value) v += A(load(b[j]));
    y[j] = store<T>(v);
  }
}

// Layer norm (RMS norm: !kCenter, mean and bias undefined) of the rows of [rows, n]; `prepare(i,
// row)` returns the row to normalize (x's, or the sum it writes first).
template <class T, bool kCenter = true, class Prepare>
void layer_norm_rows(int64_t rows, int64_t n, const Tensor& weight, const Tensor& bias, const Tensor& out,
                     const Tensor& mean, const Tensor& rstd, double eps, Prepare prepare) {
  using A = opmath_t<T>;
  const T* wp = weight.defined() ? ptr<T>(weight) : nullptr;
  const T* bp = bias.defined() ? ptr<T>(bias) : nullptr;
  T* yp = ptr<T>(out);
  A *mp = kCenter ? ptr<A>(mean) : nullptr, *rp = ptr<A>(rstd);
  with_affine(wp, bp, [&](auto has_w, auto has_b) {
    parallel_for(rows, rows * n >= kParallelGrain && rows > 1, [&](int64_t i) {
      A mu;
      layer_norm_row<kCenter>(prepare(i), wp, bp, yp + i * n, n, eps, mu, rp[i], has_w, has_b);
      if constexpr (kCenter) mp[i] = mu;
    });
  });
}

int64_t row_length(const Tensor& x) { return x.dim() ? x.size(x.dim() - 1) : 1; }

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Out& out, const Out& mean,
                const Out& rstd, double eps) {
  const int64_t n = row_length(x), rows = x.numel() / std::max<int64_t>(n, 1);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T* xp = ptr<T>(x);
    layer_norm_rows<T>(rows, n, weight, bias, out, mean, rstd, eps, [&](int64_t i) { return xp + i * n; });
  });
}

void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, const Out& sum,
                    const Out& out, const Out& mean, const Out& rstd, double eps) {
  const int64_t n = row_length(x), rows = x.numel() / std::max<int64_t>(n, 1);
  dispatch_floating(x.dtype(), "add_layer_norm", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T *xp = ptr<T>(x), *rp = ptr<T>(residual);
    T* sp = ptr<T>(sum);
    layer_norm_rows<T>(rows, n, weight, bias, out, mean, rstd, eps, [&](int64_t i) {
      T* s = sp + i * n;  // the row's sum, normalized while it is in cache
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) s[j] = store<T>(A(load(xp[i * n + j])) + A(load(rp[i * n + j])));
      return static_cast<const T*>(s);
    });
  });
}

void rms_norm(const Tensor& x, const Tensor& weight, const Out& out, const Out& rstd, double eps) {
  const int64_t n = row_length(x), rows = x.numel() / std::max<int64_t>(n, 1);
  dispatch_floating(x.dtype(), "rms_norm", [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T* xp = ptr<T>(x);
    layer_norm_rows<T, false>(rows, n, weight, Tensor(), out, Tensor(), rstd, eps,
                              [&](int64_t i) { return xp + i * n; });
  });
}

// The cpu sums grad_weight and grad_bias in each task's stack accumulators: no scratch.
std::vector<Tensor> layer_norm_backward_scratch(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                const Tensor&, const Out&, const Out&, const Out&) {
  return {};
}
std::vector<Tensor> rms_norm_backward_scratch(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Out&,
                                              const Out&) {
  return {};
}

namespace {

// layer_norm_backward, and rms_norm_backward when !kCenter (mean and grad_bias undefined: the mean is 0).
template <bool kCenter>
void norm_backward(const char* name, const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                   const Tensor& weight, const Out& grad_x, const Out& grad_weight, const Out& grad_bias) {
  const int64_t n = row_length(x), rows = x.numel() / std::max<int64_t>(n, 1);
  dispatch_floating(x.dtype(), name, [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T *xp = ptr<T>(x), *gp = ptr<T>(grad);
    const T* wp = weight.defined() ? ptr<T>(weight) : nullptr;
    const A *mp = kCenter ? ptr<A>(mean) : nullptr, *rp = ptr<A>(rstd);
    const bool parallel = rows * n >= kParallelGrain;
    if (grad_x.defined()) {
      T* gxp = ptr<T>(grad_x);
      with_affine(wp, false, [&](auto has_w, auto) {
        parallel_for(rows, parallel && rows > 1, [&](int64_t i) {
          const T *row = xp + i * n, *grow = gp + i * n, *w = wp;
          const A mu = kCenter ? mp[i] : A(0), rs = rp[i];
          auto gw = [=](int64_t j) {  // grad * weight; by value, as layer_norm_row's sums
            if constexpr (decltype(has_w)::value)
              return A(load(grow[j])) * A(load(w[j]));
            else
              return A(load(grow[j]));
          };
          const A mean_g = kCenter ? A(blocked_sum<A>(n, gw) / double(n)) : A(0);
          const A mean_gx =
              A(blocked_sum<A>(n, [=](int64_t j) { return gw(j) * ((A(load(row[j])) - mu) * rs); }) / double(n));
#pragma omp simd
          for (int64_t j = 0; j < n; ++j)
            gxp[i * n + j] = store<T>(rs * (gw(j) - mean_g - (A(load(row[j])) - mu) * rs * mean_gx));
        });
      });
    }
    T* gwp = grad_weight.defined() ? ptr<T>(grad_weight) : nullptr;
    T* gbp = grad_bias.defined() ? ptr<T>(grad_bias) : nullptr;
    if (!gwp && !gbp) return;
    // Column sums over the rows, a block of columns per task: double accumulators in SIMD lanes.
    constexpr int64_t kCols = 64;
    parallel_for((n + kCols - 1) / kCols, parallel, [&](int64_t c) {
      const int64_t j0 = c * kCols, m = std::min(kCols, n - j0);
      double sw[kCols] = {}, sb[kCols] = {};
      for (int64_t i = 0; i < rows; ++i) {
        const T *g = gp + i * n + j0, *row = xp + i * n + j0;
        const A mu = kCenter ? mp[i] : A(0), rs = rp[i];
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) {
          const A gv = A(load(g[j]));
          sw[j] += double(gv * ((A(load(row[j])) - mu) * rs));
          sb[j] += double(gv);
        }
      }
      for (int64_t j = 0; j < m; ++j) {
        if (gwp) gwp[j0 + j] = store<T>(sw[j]);
        if (gbp) gbp[j0 + j] = store<T>(sb[j]);
      }
    });
  });
}

}  // namespace

void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Out& grad_x, const Out& grad_weight, const Out& grad_bias) {
  norm_backward<true>("layer_norm_backward", grad, x, mean, rstd, weight, grad_x, grad_weight, grad_bias);
}

void rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& rstd, const Tensor& weight, const Out& grad_x,
                       const Out& grad_weight) {
  norm_backward<false>("rms_norm_backward", grad, x, Tensor(), rstd, weight, grad_x, grad_weight, Tensor());
}

namespace {
// Statistics are float32, float64 for float64 inputs.
template <class T>
using StatT = std::conditional_t<std::is_same_v<T, double>, double, float>;
}  // namespace

void batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Out& out, const Out& mean,
                const Out& var, const Out& rstd, bool training, double eps) {
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
                         const Tensor& weight, const Out& grad_x, const Out& grad_weight, const Out& grad_bias,
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

}  // namespace mg::cpu::MG_CPU_ISA_NS
