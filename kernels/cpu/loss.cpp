// Cross-entropy fused with its log-softmax, forward and backward, over the rows of [N, C] logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu {

namespace {
void check_targets(const Tensor& target, int64_t classes, int64_t ignore_index) {
  const int64_t* t = ptr<int64_t>(target);
  for (int64_t n = 0; n < target.numel(); ++n)
    MG_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < classes), IndexError,
             "cross_entropy: expected target values in [0, ", classes, ") or ignore_index ", ignore_index, ", got ",
             t[n], " at position ", n);
}
}  // namespace

// A row's class weights: w[c] from `weight`, or 1 without one; and their sum.
template <class T>
struct ClassWeights {
  const T* w;
  double sum;
  double operator[](int64_t c) const { return w ? double(load(w[c])) : 1.0; }
};
template <class T>
ClassWeights<T> class_weights(const Tensor& weight, int64_t C) {
  ClassWeights<T> r{weight.defined() ? ptr<T>(weight) : nullptr, 0.0};
  for (int64_t c = 0; c < C; ++c) r.sum += r[c];
  return r;
}

void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, const Tensor& loss,
                   int64_t ignore_index, double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  check_targets(target, C, ignore_index);
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T* xp = ptr<T>(logits);
    const int64_t* tp = ptr<int64_t>(target);
    const auto w = class_weights<T>(weight, C);
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
        if (w.w) {
          for (int64_t c = 0; c < C; ++c) {
            A v = load(row[c]);
            sum += double(exp_v(v - mx));
            total += w[c] * double(v);
          }
        } else {
#pragma omp simd reduction(+ : sum, total)
          for (int64_t c = 0; c < C; ++c) {
            A v = load(row[c]);
            sum += double(exp_v(v - mx));
            total += double(v);
          }
        }
        double lse = double(mx) + std::log(sum);
        double nll = w[tp[n]] * (lse - double(load(row[tp[n]])));
        double smooth = (w.sum * lse - total) / double(C);  // mean over classes of -w_c log p_c
        lp[n] = store<L>((1 - smoothing) * nll + smoothing * smooth);
      }
    });
  });
}

void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target, const Tensor& weight,
                            const Tensor& grad_logits, int64_t ignore_index, double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T* xp = ptr<T>(logits);
    T* gp = ptr<T>(grad_logits);
    const int64_t* tp = ptr<int64_t>(target);
    const auto w = class_weights<T>(weight, C);
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
        // d loss / d x_c = (1 - s) w_t (p_c - [c = t]) + s / C (sum(w) p_c - w_c)
        const double wt = w[tp[n]];
        const A g = A(load(glp[n])), inv = A(1.0 / sum),
                coef = w.w ? A((1 - smoothing) * wt + smoothing * w.sum / double(C)) : A(1);
        const A off = A(smoothing / double(C)), hit = A((1 - smoothing) * wt);
        if (w.w)
          for (int64_t c = 0; c < C; ++c)
            grow[c] = store<T>(g * (e(c) * inv * coef - off * A(w[c]) - (c == tp[n] ? hit : A(0))));
        else
          for (int64_t c = 0; c < C; ++c) grow[c] = store<T>(g * (e(c) * inv * coef - off - (c == tp[n] ? hit : A(0))));
      }
    });
  });
}

}  // namespace mg::cpu
