// Elementwise CPU kernels: copies and casts, fills, random fills, where and dropout (the unary and
// binary maps are elementwise_unary.cpp, elementwise_unary_backward.cpp and elementwise_binary.cpp).
// Loops for float32/float16/bfloat16 at every level, for other dtypes at the baseline's (cpu_kernels.h).
#include <cmath>
#include <cstring>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

void copy(const Tensor& src, const Out& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() && src.shape() == dst.shape()) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  MG_CPU_LOWER_UNLESS(level_has_all(src.dtype(), dst.dtype()), copy, src, dst);
  dispatch_level(dst.dtype(), [&](auto d) {
    using D = typename decltype(d)::type;
    dispatch_level(src.dtype(), [&](auto s) {
      using S = typename decltype(s)::type;
      map<D, S>(
          dst, [](auto v) { return v; }, src);
    });
  });
}

void fill(const Out& dst, double value) {
  MG_CPU_LOWER_UNLESS(level_has(dst.dtype()), fill, dst, value);
  dispatch_level(dst.dtype(), [&](auto d) {
    using T = typename decltype(d)::type;
    opmath_t<T> v = kernels::scalar_as<opmath_t<T>>(value);
    map<T>(dst, [v]() { return v; });
  });
}

// Writes f(i) into element i of a contiguous tensor.
template <class F>
void fill_indexed(const Tensor& dst, F f) {
  dispatch_level(dst.dtype(), [&](auto d) {
    using T = typename decltype(d)::type;
    T* p = ptr<T>(dst);
    int64_t n = dst.numel();
    parallel_for(n, n >= kParallelGrain, [&](int64_t i) { p[i] = store<T>(f(i)); });
  });
}

void fill_range(const Out& dst, double start, double step) {
  MG_CPU_LOWER_UNLESS(level_has(dst.dtype()), fill_range, dst, start, step);
  fill_indexed(dst, [=](int64_t i) { return start + double(i) * step; });
}

void uniform(const Out& dst, uint64_t seed, uint64_t offset, double lo, double hi) {
  MG_CPU_LOWER_UNLESS(level_has(dst.dtype()), uniform, dst, seed, offset, lo, hi);
  fill_indexed(dst, [=](int64_t i) { return lo + (hi - lo) * double(kernels::random_uniform(seed, offset, i)); });
}

void normal(const Out& dst, uint64_t seed, uint64_t offset, double mean, double std) {
  MG_CPU_LOWER_UNLESS(level_has(dst.dtype()), normal, dst, seed, offset, mean, std);
  fill_indexed(dst, [=](int64_t i) { return mean + std * double(kernels::random_normal(seed, offset, i)); });
}

void randint(const Out& dst, uint64_t seed, uint64_t offset, int64_t lo, int64_t hi) {
  MG_CPU_LOWER_UNLESS(level_has(dst.dtype()), randint, dst, seed, offset, lo, hi);
  uint64_t range = uint64_t(hi - lo);
  fill_indexed(dst, [=](int64_t i) {  // multiply-shift maps a 32-bit word onto [0, range)
    return double(lo + int64_t((uint64_t(kernels::random_word(seed, offset, i)) * range) >> 32));
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Out& out) {
  MG_CPU_LOWER_UNLESS(level_has(out.dtype()), where, cond, a, b, out);
  dispatch_level(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, bool, T, T>(
        out, [](bool c, auto u, auto v) { return c ? u : v; }, cond, a, b);
  });
}

void dropout(const Tensor& x, const Out& out, double p, uint64_t seed, uint64_t offset) {
  // x and out are contiguous; element i keeps when its uniform draw is >= p.
  MG_CPU_LOWER_UNLESS(level_has(x.dtype()), dropout, x, out, p, seed, offset);
  dispatch_floating_level(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const T* xp = ptr<T>(x);
    T* op = ptr<T>(out);
    const A scale = A(1.0 / (1.0 - p));
    const float pf = float(p);
    const int64_t n = x.numel(), chunks = (n + kRandomChunk - 1) / kRandomChunk;
    parallel_for(chunks, n >= kParallelGrain, [&](int64_t c) {
      const int64_t first = c * kRandomChunk;
      for_each_uniform(seed, offset, uint64_t(first), std::min(kRandomChunk, n - first),
                       [&](int64_t, const float* u, int64_t m) {
#pragma omp simd
                         for (int64_t k = 0; k < m; ++k)
                           op[first + k] = store<T>(u[k] >= pf ? load(xp[first + k]) * scale : A(0));
                       });
    });
  });
}

void bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, const Out& out, double p,
                      uint64_t seed, uint64_t offset) {
  MG_CPU_LOWER_UNLESS(level_has(x.dtype()), bias_dropout_add, x, bias, residual, out, p, seed, offset);
  dispatch_floating_level(x.dtype(), "bias_dropout_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const T *xp = ptr<T>(x), *bp = ptr<T>(bias), *rp = ptr<T>(residual);
    T* op = ptr<T>(out);
    const int64_t n = std::max<int64_t>(bias.numel(), 1), rows = x.numel() / n;
    const A scale = A(1.0 / (1.0 - p));
    const float pf = float(p);
    // drop(v, u): dropout's value given the element's uniform draw u (read only when `draws`); one
    // loop per case.
    auto run = [&](auto draws, auto drop) {
      parallel_for(rows, x.numel() >= kParallelGrain && rows > 1, [&](int64_t r) {
        auto part = [&](int64_t j0, const float* u, int64_t m) {
#pragma omp simd
          for (int64_t k = 0; k < m; ++k) {
            const int64_t j = j0 + k, i = r * n + j;
            const A v = load(store<T>(A(load(xp[i])) + A(load(bp[j]))));
            op[i] = store<T>(A(load(rp[i])) + A(load(store<T>(drop(v, decltype(draws)::value ? u[k] : 0.0f)))));
          }
        };
        if constexpr (decltype(draws)::value)
          for_each_uniform(seed, offset, uint64_t(r * n), n, part);
        else
          part(0, nullptr, n);
      });
    };
    if (p <= 0)
      run(std::false_type{}, [](A v, float) { return v; });
    else if (p >= 1)
      run(std::false_type{}, [](A v, float) { return v * A(0); });
    else
      run(std::true_type{}, [&](A v, float u) { return u >= pf ? v * scale : A(0); });
  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
