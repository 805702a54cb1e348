// Cross-entropy fused with its log-softmax, forward and backward, over the rows of [N, C] logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

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

void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, const Out& loss,
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
      parallel_for(N, N * C >= kParallelGrain, [&](int64_t n) {
        if (tp[n] == ignore_index) {
          lp[n] = store<L>(0.0);
          return;
        }
        const T* row = xp + n * C;
        const A mx = row_max(row, C);
        const double sum = blocked_sum<A>(C, [=](int64_t c) { return exp_v(A(load(row[c])) - mx); });
        const double lse = double(mx) + std::log(sum), nll = w[tp[n]] * (lse - double(load(row[tp[n]])));
        // smoothing: the mean over classes of -w_c log p_c; logits of both signs, so shifted by max
        double smooth = 0;
        if (smoothing != 0) {
          const double shifted = w.w ? blocked_sum<A>(C, [=](int64_t c) { return A(w[c]) * (A(load(row[c])) - mx); })
                                     : blocked_sum<A>(C, [=](int64_t c) { return A(load(row[c])) - mx; });
          smooth = (w.sum * (lse - double(mx)) - shifted) / double(C);
        }
        lp[n] = store<L>((1 - smoothing) * nll + smoothing * smooth);
      });
    });
  });
}

void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target, const Tensor& weight,
                            const Out& grad_logits, int64_t ignore_index, double smoothing) {
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
      parallel_for(N, N * C >= kParallelGrain, [&](int64_t n) {
        T* grow = gp + n * C;
        if (tp[n] == ignore_index) {
          std::fill(grow, grow + C, store<T>(0.0));
          return;
        }
        const T* row = xp + n * C;
        const A mx = row_max(row, C);
        // exp(x - max) once per element, kept in the output row; 16-bit storage would round it,
        // so those recompute it.
        constexpr bool kKeep = std::is_same_v<T, A>;
        const double sum = blocked_sum<A>(C, [=](int64_t c) {
          const A e = exp_v(A(load(row[c])) - mx);
          if constexpr (kKeep) grow[c] = e;
          return e;
        });
        auto e = [&](int64_t c) { return kKeep ? A(load(grow[c])) : exp_v(A(load(row[c])) - mx); };
        // d loss / d x_c = (1 - s) w_t (p_c - [c = t]) + s / C (sum(w) p_c - w_c)
        const int64_t t = tp[n];
        const double wt = w[t];
        const A g = A(load(glp[n])), inv = A(1.0 / sum), off = A(smoothing / double(C)), hit = A((1 - smoothing) * wt),
                coef = w.w ? A((1 - smoothing) * wt + smoothing * w.sum / double(C)) : A(1);
        const A at_target = g * (e(t) * inv * coef - off * A(w[t]) - hit);  // read before the loop overwrites it
        if (w.w) {
          for (int64_t c = 0; c < C; ++c) grow[c] = store<T>(g * (e(c) * inv * coef - off * A(w[c])));
        } else {
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) grow[c] = store<T>(g * (e(c) * inv - off));
        }
        grow[t] = store<T>(at_target);
      });
    });
  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
