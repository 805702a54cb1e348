// Softmax and log-softmax on a contiguous [outer, r, inner] view, along r, and their backward.
#include <algorithm>
#include <cmath>
#include <limits>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu {

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

}  // namespace mg::cpu
