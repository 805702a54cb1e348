// Softmax and log-softmax on a contiguous [outer, r, inner] view, along r, and their backward;
// softmax(scale * x + mask) over the rows of attention scores. Contiguous rows of float32/float64
// run in SIMD lanes (a max, exp with a blocked sum, a scale); strided lines and 16-bit storage
// take the scalar loops.
#include <algorithm>
#include <cmath>
#include <limits>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

// y[k] = softmax of the row v(k), k < n, whose max is mx. v reads y itself for a row in place
// (one pointer: no aliasing check, which two equal pointers would fail into the scalar loop).
template <class A, class V>
void softmax_row(V v, A* y, int64_t n, A mx) {
  const double sum = blocked_sum<A>(n, [=](int64_t k) {  // by value: a captured reference to y
    const A e = exp_v(v(k) - mx);                        // would keep the loop scalar (alias sets)
    y[k] = e;
    return e;
  });
  const A inv = A(1.0 / sum);
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) y[k] *= inv;
}

// True when lines are contiguous rows of a type the SIMD loops take.
template <class T>
constexpr bool kSimdRows = std::is_same_v<T, opmath_t<T>>;

}  // namespace

void softmax(const Tensor& x, const Out& out, int64_t outer, int64_t r, int64_t inner, bool log) {
  dispatch_floating(x.dtype(), "softmax", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T* xp = ptr<T>(x);
    T* yp = ptr<T>(out);
    for_each_line(outer, r, inner, [&](int64_t, int64_t base, int64_t st) {
      const T* x = xp + base;
      T* y = yp + base;
      if constexpr (kSimdRows<T>) {
        if (st == 1 && !log) return softmax_row<A>([x](int64_t k) { return x[k]; }, y, r, row_max(x, r));
      }
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
      // Strided lines or 16-bit storage (which would round the intermediate): exp twice.
      for (int64_t k = 0; k < r; ++k) sum += double(exp_v(A(load(x[k * st])) - mx));
      const A inv = A(1.0 / sum);
      for (int64_t k = 0; k < r; ++k) y[k * st] = store<T>(exp_v(A(load(x[k * st])) - mx) * inv);
    });
  });
}

void softmax_backward(const Tensor& grad, const Tensor& out, const Out& grad_in, int64_t outer, int64_t r,
                      int64_t inner, bool log) {
  dispatch_floating(out.dtype(), "softmax_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T *gp = ptr<T>(grad), *yp = ptr<T>(out);
    T* gi = ptr<T>(grad_in);
    for_each_line(outer, r, inner, [&](int64_t, int64_t base, int64_t st) {
      if constexpr (kSimdRows<T>) {
        if (st == 1 && !log) {  // y * (g - sum(g * y))
          const T *g = gp + base, *y = yp + base;
          T* o = gi + base;
          const A dot = A(blocked_sum<A>(r, [=](int64_t k) { return g[k] * y[k]; }));
#pragma omp simd
          for (int64_t k = 0; k < r; ++k) o[k] = y[k] * (g[k] - dot);
          return;
        }
      }
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

void scaled_masked_softmax(const Tensor& x, const Tensor& mask, const Out& out, double scale, bool causal,
                           const AttentionMask& m) {
  const int64_t BH = x.size(0), Tq = x.size(1), Tk = x.size(2);
  dispatch_floating(x.dtype(), "scaled_masked_softmax", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    using Kind = AttentionMask::Kind;
    const T* xp = ptr<T>(x);
    T* yp = ptr<T>(out);
    const A sc = A(scale), hidden = -std::numeric_limits<A>::infinity();
    const bool* bool_mask = m.kind == Kind::Bool ? ptr<bool>(mask) : nullptr;
    const T* add_mask = m.kind == Kind::Additive ? ptr<T>(mask) : nullptr;
    // The row's masked scores v(k), rounded where the composed ops store them; one loop per mask
    // kind, so no loop branches on it. f(v) gets each row's v and returns the row's values.
    auto rows = [&](auto masked) {
      parallel_for(BH * Tq, x.numel() >= kParallelGrain && BH * Tq > 1, [&](int64_t row) {
        const int64_t bh = row / Tq, i = row % Tq, off = m.kind == Kind::None ? 0 : m.offset(bh, i, 0);
        const int64_t seen = causal ? i + 1 : Tk;  // keys k < seen pass the causal mask: a select, no branch
        // A causal row's keys past the sum block of its first hidden key add exactly 0 to the sum:
        // they are not computed but copied from that key's value (0, or NaN where the composed ops
        // give NaN), the rest is the composed ops' sum bit for bit, and a causal square skips up to
        // half its exps.
        const int64_t n = causal ? std::min(Tk, (seen / kSumBlock + 1) * kSumBlock) : Tk;
        const T* xr = xp + row * Tk;
        T* yr = yp + row * Tk;
        const int64_t stride_k = m.stride_k;
        auto v = [=](int64_t k) {
          const A s = A(load(store<T>(A(load(xr[k])) * sc)));
          return masked(k < seen ? s : hidden, off + k * stride_k);
        };
        if constexpr (kSimdRows<T>) {  // the scores into y, then softmax in place
          A mx = hidden;
#pragma omp simd reduction(max : mx)
          for (int64_t k = 0; k < n; ++k) {
            yr[k] = v(k);
            mx = std::max(mx, yr[k]);
          }
          softmax_row<A>([yr](int64_t k) { return yr[k]; }, yr, n, mx);
        } else {
          A mx = hidden;
          for (int64_t k = 0; k < n; ++k) mx = std::max(mx, v(k));
          double sum = 0;
          for (int64_t k = 0; k < n; ++k) sum += double(exp_v(v(k) - mx));
          const A inv = A(1.0 / sum);
          for (int64_t k = 0; k < n; ++k) yr[k] = store<T>(exp_v(v(k) - mx) * inv);
        }
        if (n < Tk) std::fill(yr + n, yr + Tk, yr[seen]);
      });
    };
    switch (m.kind) {
      case Kind::None:
        return rows([](A s, int64_t) { return s; });
      case Kind::Bool:
        return rows([=](A s, int64_t j) { return bool_mask[j] ? s : hidden; });
      case Kind::Additive:
        return rows([=](A s, int64_t j) { return A(load(store<T>(s + A(load(add_mask[j]))))); });
    }
  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
