// Multi-tensor ops: optimizer updates (the element rules of kernels/update_rules.h, one tensor after
// another, elements in parallel) and the loss scaler's inf/NaN check with unscaling.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

// f(p, i) for i < n, one `omp simd` loop (the operands of one tensor never overlap). Not inlined:
// every caller runs this one copy, so a tensor's elements get the same instructions whether they
// come in one piece or in chunks, with a float32 gradient or a half one widened into a buffer (the
// compiler would otherwise be free to contract the rules' products into FMAs differently per loop).
template <size_t D, class T, class F>
__attribute__((noinline)) void elements(const std::array<T*, D> p, int64_t n, const F f) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) f(p, i);
}

template <size_t D, class T>
std::array<T*, D> shifted(std::array<T*, D> p, int64_t offset) {
  for (T*& q : p) q = q ? q + offset : nullptr;
  return p;
}

// run(begin, end) over [0, n): at once below kParallelGrain, else in one static range per thread.
// (Not `parallel for if (...)`: libgomp enters a region even when the condition is false.)
template <class Run>
void in_ranges(int64_t n, const Run& run) {
  if (n < kParallelGrain) return run(int64_t(0), n);
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
    if (end > begin) run(begin, end);
  }
}

// Calls f(p, i) for every element i of tensor j, where f = make(Tag<T>{}) is built once per tensor
// (scalars converted there) and p[k] points at operand k's storage type (null for an undefined
// operand). A float32 parameter with a half gradient (operand 1: the mixed-precision step, no float32
// copy of the gradients) runs the float32 f over chunks whose gradient is a float32 buffer: each
// element widened and multiplied by `factors` (rules::scaled_grad), as a float32 copy scaled in place
// would hold it, so the step is the float32 step's to the bit.
template <size_t D, class Make>
void for_each_element(const char* op, const TensorLists& lists, size_t j, const rules::GradFactors& factors,
                      Make&& make) {
  const Tensor& first = lists[0][j];
  const int64_t n = first.numel();
  const DType grad = lists[1][j].dtype();
  if (grad == first.dtype())
    return dispatch_floating(first.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::array<T*, D> p{};
      for (size_t k = 0; k < D; ++k) p[k] = lists[k][j].defined() ? ptr<T>(lists[k][j]) : nullptr;
      const auto f = make(tag);
      in_ranges(n, [&](int64_t begin, int64_t end) { elements(shifted(p, begin), end - begin, f); });
    });
  MG_CHECK(first.dtype() == kFloat32 && is_half(grad), DTypeError, op,
           ": expected a gradient of the parameter's dtype, or a half gradient of a float32 parameter, got ",
           first.dtype(), " and ", grad);
  std::array<float*, D> p{};
  for (size_t k = 0; k < D; ++k) p[k] = k != 1 && lists[k][j].defined() ? ptr<float>(lists[k][j]) : nullptr;
  const auto f = make(Tag<float>{});
  auto widened = [&](auto tag) {
    using G = typename decltype(tag)::type;
    const G* h = ptr<G>(lists[1][j]);
    in_ranges(n, [&](int64_t begin, int64_t end) {
      constexpr int64_t kChunk = 2048;
      float buffer[kChunk];
      for (int64_t c = begin; c < end; c += kChunk) {
        const int64_t m = std::min(kChunk, end - c);
        for (int64_t i = 0; i < m; ++i) buffer[i] = rules::scaled_grad(float(load(h[c + i])), factors);
        std::array<float*, D> q = shifted(p, c);
        q[1] = buffer;
        elements(q, m, f);
      }
    });
  };
  grad == kFloat16 ? widened(Tag<Half>{}) : widened(Tag<BFloat16>{});
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
      for_each_element<3>("SGD", lists, j, s.grad, [&](auto tag) {
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
      for_each_element<5>("Adam", lists, j, s.grad, [&](auto tag) {
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
    for_each_element<3>("Lion", lists, j, rules::GradFactors{}, [&](auto tag) {  // one dtype (ops: no half grads)
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
