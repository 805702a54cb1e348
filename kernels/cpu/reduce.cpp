// Row-wise CPU kernels: reductions, softmax, cross-entropy and layer norm. Each works on a
// contiguous [outer, r, inner] view and reduces along r.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu {

namespace {
// Accumulator type: double for floating inputs, int64 for integers and bool.
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;

// Calls f(o, i, base, stride) for every (outer, inner) line of length r, in parallel.
template <class F>
void for_each_line(int64_t outer, int64_t r, int64_t inner, F f) {
  int64_t lines = outer * inner;
#pragma omp parallel for if (lines * r >= kParallelGrain && lines > 1)
  for (int64_t l = 0; l < lines; ++l) {
    int64_t o = l / inner, i = l % inner;
    f(l, o * r * inner + i, inner);
  }
}
}  // namespace

void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner) {
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = acc_t<T>;
    const T* xp = ptr<T>(x);
    dispatch(out.dtype(), [&](auto ot) {
      using O = typename decltype(ot)::type;
      O* op_ = ptr<O>(out);
      if (op == ReduceOp::Sum && inner > 1) {  // add whole rows with unit stride, a block of columns per task
        constexpr int64_t kCols = 256;
        const int64_t blocks = (inner + kCols - 1) / kCols;
#pragma omp parallel for if (outer * r * inner >= kParallelGrain && outer * blocks > 1)
        for (int64_t t = 0; t < outer * blocks; ++t) {
          const int64_t o = t / blocks, j0 = t % blocks * kCols, n = std::min(kCols, inner - j0);
          A acc[kCols] = {};
          const T* p = xp + o * r * inner + j0;
          for (int64_t k = 0; k < r; ++k, p += inner)
            for (int64_t j = 0; j < n; ++j) acc[j] += A(load(p[j]));
          for (int64_t j = 0; j < n; ++j) op_[o * inner + j0 + j] = store<O>(acc[j]);
        }
        return;
      }
      if (op == ReduceOp::Sum) {
        for_each_line(outer, r, inner, [&](int64_t l, int64_t base, int64_t st) {
          A acc = 0;
          const T* p = xp + base;
          if (st == 1) {
#pragma omp simd reduction(+ : acc)
            for (int64_t k = 0; k < r; ++k) acc += A(load(p[k]));
          } else {
            for (int64_t k = 0; k < r; ++k) acc += A(load(p[k * st]));
          }
          op_[l] = store<O>(acc);
        });
        return;
      }
      const bool is_max = op == ReduceOp::Max;
      for_each_line(outer, r, inner, [&](int64_t l, int64_t base, int64_t st) {
        auto best = load(xp[base]);
        for (int64_t k = 1; k < r; ++k) {
          auto v = load(xp[base + k * st]);
          if (is_nan(v)) {  // NaN propagates
            best = v;
            break;
          }
          if (is_max ? v > best : v < best) best = v;
        }
        op_[l] = store<O>(best);
      });
    });
  });
}

void arg_reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer, int64_t r,
                int64_t inner) {
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T* xp = ptr<T>(x);
    T* vp = values.defined() ? ptr<T>(values) : nullptr;
    int64_t* ip = ptr<int64_t>(indices);
    const bool is_max = op == ReduceOp::Max;
    for_each_line(outer, r, inner, [&](int64_t l, int64_t base, int64_t st) {
      auto best = load(xp[base]);
      int64_t bi = 0;
      for (int64_t k = 1; k < r && !is_nan(best); ++k) {
        auto v = load(xp[base + k * st]);
        if (is_nan(v) || (is_max ? v > best : v < best)) best = v, bi = k;  // first extreme; NaN wins
      }
      if (vp) vp[l] = xp[base + bi * st];
      ip[l] = bi;
    });
  });
}

void softmax(const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner, bool log) {
  dispatch_floating(x.dtype(), "softmax", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T* xp = ptr<T>(x);
    T* yp = ptr<T>(out);
    for_each_line(outer, r, inner, [&](int64_t, int64_t base, int64_t st) {
      const T* x = xp + base;
      T* y = yp + base;
      A mx = -std::numeric_limits<A>::infinity();
      for (int64_t k = 0; k < r; ++k) mx = std::max(mx, A(load(x[k * st])));
      double sum = 0;
      if (log) {
#pragma omp simd reduction(+ : sum)
        for (int64_t k = 0; k < r; ++k) sum += double(exp_v(A(load(x[k * st])) - mx));
        A log_sum = A(std::log(sum));  // (x - max) - log(sum): no cancellation against a large max
        for (int64_t k = 0; k < r; ++k) y[k * st] = store<T>(load(x[k * st]) - mx - log_sum);
        return;
      }
      if constexpr (std::is_same_v<T, A>) {  // one exp per element: keep exp(x - max), then scale
#pragma omp simd reduction(+ : sum)
        for (int64_t k = 0; k < r; ++k) {
          A e = exp_v(x[k * st] - mx);
          y[k * st] = e;
          sum += double(e);
        }
        const A inv = A(1.0 / sum);
        for (int64_t k = 0; k < r; ++k) y[k * st] *= inv;
      } else {  // 16-bit storage would round the intermediate: compute exp again
        for (int64_t k = 0; k < r; ++k) sum += double(exp_v(A(load(x[k * st])) - mx));
        const A inv = A(1.0 / sum);
        for (int64_t k = 0; k < r; ++k) y[k * st] = store<T>(exp_v(A(load(x[k * st])) - mx) * inv);
      }
    });
  });
}

void softmax_backward(const Tensor& grad, const Tensor& out, const Tensor& grad_in, int64_t outer, int64_t r,
                      int64_t inner, bool log) {
  dispatch_floating(out.dtype(), "softmax_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T *gp = ptr<T>(grad), *yp = ptr<T>(out);
    T* gi = ptr<T>(grad_in);
    for_each_line(outer, r, inner, [&](int64_t, int64_t base, int64_t st) {
      double dot = 0;  // softmax: sum(g * y); log_softmax: sum(g)
      for (int64_t k = 0; k < r; ++k) {
        int64_t j = base + k * st;
        dot += log ? double(load(gp[j])) : double(load(gp[j])) * double(load(yp[j]));
      }
      for (int64_t k = 0; k < r; ++k) {
        int64_t j = base + k * st;
        A g = load(gp[j]), y = load(yp[j]);
        gi[j] = store<T>(log ? g - std::exp(y) * A(dot) : y * (g - A(dot)));
      }
    });
  });
}

namespace {
void check_targets(const Tensor& target, int64_t classes, int64_t ignore_index) {
  const int64_t* t = ptr<int64_t>(target);
  for (int64_t n = 0; n < target.numel(); ++n)
    MG_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < classes), IndexError,
             "cross_entropy: expected target values in [0, ", classes, ") or ignore_index ", ignore_index, ", got ",
             t[n], " at position ", n);
}
}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& loss, int64_t ignore_index,
                   double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  check_targets(target, C, ignore_index);
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T* xp = ptr<T>(logits);
    const int64_t* tp = ptr<int64_t>(target);
    dispatch_floating(loss.dtype(), "cross_entropy", [&](auto lt) {
      using L = typename decltype(lt)::type;
      L* lp = ptr<L>(loss);
#pragma omp parallel for if (N * C >= kParallelGrain)
      for (int64_t n = 0; n < N; ++n) {
        if (tp[n] == ignore_index) {
          lp[n] = store<L>(0.0);
          continue;
        }
        const T* row = xp + n * C;
        A mx = -std::numeric_limits<A>::infinity();
        double sum = 0, total = 0;
        for (int64_t c = 0; c < C; ++c) mx = std::max(mx, A(load(row[c])));
#pragma omp simd reduction(+ : sum, total)
        for (int64_t c = 0; c < C; ++c) {
          A v = load(row[c]);
          sum += double(exp_v(v - mx));
          total += double(v);
        }
        double lse = double(mx) + std::log(sum);
        double nll = lse - double(load(row[tp[n]]));
        double smooth = lse - total / double(C);  // mean over classes of -log p
        lp[n] = store<L>((1 - smoothing) * nll + smoothing * smooth);
      }
    });
  });
}

void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target,
                            const Tensor& grad_logits, int64_t ignore_index, double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T* xp = ptr<T>(logits);
    T* gp = ptr<T>(grad_logits);
    const int64_t* tp = ptr<int64_t>(target);
    dispatch_floating(grad_loss.dtype(), "cross_entropy_backward", [&](auto lt) {
      using L = typename decltype(lt)::type;
      const L* glp = ptr<L>(grad_loss);
#pragma omp parallel for if (N * C >= kParallelGrain)
      for (int64_t n = 0; n < N; ++n) {
        T* grow = gp + n * C;
        if (tp[n] == ignore_index) {
          for (int64_t c = 0; c < C; ++c) grow[c] = store<T>(0.0);
          continue;
        }
        const T* row = xp + n * C;
        A mx = -std::numeric_limits<A>::infinity();
        double sum = 0;
        for (int64_t c = 0; c < C; ++c) mx = std::max(mx, A(load(row[c])));
        // exp(x - max) once per element; 16-bit storage would round it, so those recompute it.
        auto e = [&](int64_t c) { return std::is_same_v<T, A> ? A(load(grow[c])) : exp_v(A(load(row[c])) - mx); };
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < C; ++c) {
          A v = exp_v(A(load(row[c])) - mx);
          if constexpr (std::is_same_v<T, A>) grow[c] = v;
          sum += double(v);
        }
        const A g = A(load(glp[n])), inv = A(1.0 / sum), off = A(smoothing / double(C)), hit = A(1 - smoothing);
        for (int64_t c = 0; c < C; ++c) grow[c] = store<T>(g * (e(c) * inv - off - (c == tp[n] ? hit : A(0))));
      }
    });
  });
}

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
    float *mp = ptr<float>(mean), *rp = ptr<float>(rstd);
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
      mp[i] = float(mu);
      rp[i] = float(rs);
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
    const float *mp = ptr<float>(mean), *rp = ptr<float>(rstd);
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
