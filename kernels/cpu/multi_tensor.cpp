// Multi-tensor ops: optimizer updates (the element rules of kernels/update_rules.h, one tensor after
// another, elements in parallel) and the loss scaler's inf/NaN check with unscaling.
#include <array>
#include <cmath>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

// Calls f(p, i) for every element i of tensor j, where f = make(Tag<T>{}) is built once per
// tensor (scalars converted there) and p[k] points at operand k's storage type (null for an
// undefined operand). The loop is `omp simd`: the operands of one tensor never overlap.
template <size_t D, class Make>
void for_each_element(const char* op, const TensorLists& lists, size_t j, Make&& make) {
  const Tensor& first = lists[0][j];
  dispatch_floating(first.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::array<T*, D> p{};
    for (size_t k = 0; k < D; ++k) p[k] = lists[k][j].defined() ? ptr<T>(lists[k][j]) : nullptr;
    const auto f = make(tag);
    const int64_t n = first.numel();
    // Not `parallel for simd if (...)`: with the if clause GCC 12 leaves the loop scalar (and
    // libgomp enters a region even when it is false; see parallel_for).
    if (n < kParallelGrain) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) f(p, i);
      return;
    }
#pragma omp parallel
    {
      const std::array<T*, D> q = p;  // thread-private copies the vectorizer can keep in registers
      const auto g = f;
#pragma omp for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) g(q, i);
    }
  });
}

// Calls f(std::true_type{}) or f(std::false_type{}): a per-tensor flag as a compile-time one, so
// the element loop has no branch on it.
template <class F>
void with_flag(bool flag, F&& f) {
  flag ? f(std::true_type{}) : f(std::false_type{});
}

}  // namespace

void sgd_update(const TensorLists& lists, const std::vector<rules::SGDScalars>& scalars) {
  for (size_t j = 0; j < scalars.size(); ++j) {
    const rules::SGDScalars& s = scalars[j];
    with_flag(lists[2][j].defined(), [&](auto has_buf) {
      for_each_element<3>("SGD", lists, j, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return [s](const std::array<T*, 3>& p, int64_t i) {
          using A = opmath_t<T>;
          A x = load(p[0][i]), b = decltype(has_buf)::value ? load(p[2][i]) : A(0);
          rules::sgd<A>(x, load(p[1][i]), b, s);
          p[0][i] = store<T>(x);
          if constexpr (decltype(has_buf)::value) p[2][i] = store<T>(b);
        };
      });
    });
  }
}

void adam_update(const TensorLists& lists, const std::vector<rules::AdamScalars>& scalars) {
  for (size_t j = 0; j < scalars.size(); ++j) {
    const rules::AdamScalars& s = scalars[j];
    with_flag(s.amsgrad, [&](auto amsgrad) {
      constexpr bool kAmsgrad = decltype(amsgrad)::value;
      for_each_element<5>("Adam", lists, j, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = opmath_t<T>;
        return [c = rules::AdamCoeffs<A>(s)](const std::array<T*, 5>& p, int64_t i) {
          A x = load(p[0][i]), m = load(p[2][i]), v = load(p[3][i]), w = kAmsgrad ? load(p[4][i]) : A(0);
          rules::adam<A, kAmsgrad>(x, load(p[1][i]), m, v, w, c);
          p[0][i] = store<T>(x), p[2][i] = store<T>(m), p[3][i] = store<T>(v);
          if constexpr (kAmsgrad) p[4][i] = store<T>(w);
        };
      });
    });
  }
}

void lion_update(const TensorLists& lists, const std::vector<rules::LionScalars>& scalars) {
  for (size_t j = 0; j < scalars.size(); ++j)
    for_each_element<3>("Lion", lists, j, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = opmath_t<T>;
      return [c = rules::LionCoeffs<A>(scalars[j])](const std::array<T*, 3>& p, int64_t i) {
        A x = load(p[0][i]), m = load(p[2][i]);
        rules::lion<A>(x, load(p[1][i]), m, c);
        p[0][i] = store<T>(x), p[2][i] = store<T>(m);
      };
    });
}

void non_finite_check_and_unscale(const std::vector<Tensor>& tensors, const Out& found_inf, double inv_scale) {
  int found = 0;
  for (const Tensor& t : tensors)
    dispatch_floating(t.dtype(), "non_finite_check_and_unscale", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = opmath_t<T>;
      T* p = ptr<T>(t);
      const int64_t n = t.numel();
      const A f = A(inv_scale);  // as mul_ computes
      const bool scale = inv_scale != 1.0;
      int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        A v = load(p[i]);
        bad |= !std::isfinite(v);
        if (scale) p[i] = store<T>(v * f);
      }
      found |= bad;
    });
  if (found) ptr<float>(found_inf)[0] = 1.0f;
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
