// Elementwise CPU kernels: copies and casts, fills, random fills, unary and binary maps.
#include <cmath>
#include <cstring>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>
#include <memgrad/kernels/unary.h>

namespace mg::cpu::MG_CPU_ISA_NS {

void copy(const Tensor& src, const Out& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() && src.shape() == dst.shape()) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  dispatch(dst.dtype(), [&](auto d) {
    using D = typename decltype(d)::type;
    dispatch(src.dtype(), [&](auto s) {
      using S = typename decltype(s)::type;
      map<D, S>(
          dst, [](auto v) { return v; }, src);
    });
  });
}

void fill(const Out& dst, double value) {
  dispatch(dst.dtype(), [&](auto d) {
    using T = typename decltype(d)::type;
    opmath_t<T> v = kernels::scalar_as<opmath_t<T>>(value);
    map<T>(dst, [v]() { return v; });
  });
}

// Writes f(i) into element i of a contiguous tensor.
template <class F>
void fill_indexed(const Tensor& dst, F f) {
  dispatch(dst.dtype(), [&](auto d) {
    using T = typename decltype(d)::type;
    T* p = ptr<T>(dst);
    int64_t n = dst.numel();
    parallel_for(n, n >= kParallelGrain, [&](int64_t i) { p[i] = store<T>(f(i)); });
  });
}

void fill_range(const Out& dst, double start, double step) {
  fill_indexed(dst, [=](int64_t i) { return start + double(i) * step; });
}

void uniform(const Out& dst, uint64_t seed, uint64_t offset, double lo, double hi) {
  fill_indexed(dst, [=](int64_t i) { return lo + (hi - lo) * double(kernels::random_uniform(seed, offset, i)); });
}

void normal(const Out& dst, uint64_t seed, uint64_t offset, double mean, double std) {
  fill_indexed(dst, [=](int64_t i) { return mean + std * double(kernels::random_normal(seed, offset, i)); });
}

void randint(const Out& dst, uint64_t seed, uint64_t offset, int64_t lo, int64_t hi) {
  uint64_t range = uint64_t(hi - lo);
  fill_indexed(dst, [=](int64_t i) {  // multiply-shift maps a 32-bit word onto [0, range)
    return double(lo + int64_t((uint64_t(kernels::random_word(seed, offset, i)) * range) >> 32));
  });
}

void unary(UnaryOp op, const Tensor& x, const Out& out, UnaryParams p) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = std::conditional_t<std::is_same_v<T, bool>, int64_t, opmath_t<T>>;
    auto go = [&](auto f) {
      map<T, T>(
          out, [f](auto v) { return f(A(v)); }, x);
    };
    const A a = kernels::scalar_as<A>(p.a), b = kernels::scalar_as<A>(p.b);
    switch (op) {
      case UnaryOp::Neg:
        return go([](A v) { return -v; });
      case UnaryOp::Exp:
        return go([](A v) { return std::exp(v); });
      case UnaryOp::Log:
        return go([](A v) { return std::log(v); });
      case UnaryOp::Sqrt:
        return go([](A v) { return std::sqrt(v); });
      case UnaryOp::Rsqrt:
        return go([](A v) { return A(1) / std::sqrt(v); });
      case UnaryOp::Abs:
        return go([](A v) { return v < A(0) ? -v : v; });
      case UnaryOp::Tanh:
        return go([](A v) { return std::tanh(v); });
      case UnaryOp::Sigmoid:
        return go([](A v) { return kernels::sigmoid_f(v); });
      case UnaryOp::Relu:
        return go([](A v) { return v > A(0) ? v : A(0); });
      case UnaryOp::GeluErf:
        return go([](A v) { return kernels::gelu_erf_f(v); });
      case UnaryOp::GeluTanh:
        return go([](A v) { return kernels::gelu_tanh_f(v); });
      case UnaryOp::Silu:
        return go([](A v) { return kernels::silu_f(v); });
      case UnaryOp::Erf:
        return go([](A v) { return std::erf(v); });
      case UnaryOp::PowScalar:
        return go([e = p.a](A v) { return A(std::pow(v, e)); });
      case UnaryOp::Clamp:
        return go([a, b](A v) { return v < a ? a : (v > b ? b : v); });
      case UnaryOp::AddScalar:
        return go([a](A v) { return v + a; });
      case UnaryOp::MulScalar:
        return go([a](A v) { return v * a; });
      case UnaryOp::RsubScalar:
        return go([a](A v) { return a - v; });
    }
  });
}

void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& saved, const Out& grad_in, UnaryParams p) {
  dispatch_floating(grad.dtype(), "unary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    kernels::with_unary_op(op, [&](auto u) {  // the formula is picked once, outside the loop
      constexpr UnaryOp o = decltype(u)::value;
      map<T, T, T>(
          grad_in, [p](A g, A s) { return kernels::unary_grad<o>(g, s, p); }, grad, saved);
    });
  });
}

void binary(BinaryOp op, const Tensor& x, const Tensor& y, const Out& out, double alpha) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = std::conditional_t<std::is_same_v<T, bool>, int64_t, opmath_t<T>>;
    auto go = [&](auto f) {
      map<T, T, T>(
          out, [f](auto u, auto v) { return f(A(u), A(v)); }, x, y);
    };
    auto cmp = [&](auto f) {
      map<bool, T, T>(
          out, [f](auto u, auto v) { return f(A(u), A(v)); }, x, y);
    };
    const A al = kernels::scalar_as<A>(alpha);
    switch (op) {
      case BinaryOp::Add:
        return go([al](A u, A v) { return u + al * v; });
      case BinaryOp::Sub:
        return go([al](A u, A v) { return u - al * v; });
      case BinaryOp::Mul:
        return go([](A u, A v) { return u * v; });
      case BinaryOp::Div:
        return go([](A u, A v) { return u / v; });
      case BinaryOp::Pow:
        return go([](A u, A v) { return A(std::pow(u, v)); });
      case BinaryOp::Max:
        return go([](A u, A v) { return is_nan(u) ? u : (u > v ? u : v); });
      case BinaryOp::Min:
        return go([](A u, A v) { return is_nan(u) ? u : (u < v ? u : v); });
      case BinaryOp::Eq:
        return cmp([](A u, A v) { return u == v; });
      case BinaryOp::Ne:
        return cmp([](A u, A v) { return u != v; });
      case BinaryOp::Lt:
        return cmp([](A u, A v) { return u < v; });
      case BinaryOp::Le:
        return cmp([](A u, A v) { return u <= v; });
      case BinaryOp::Gt:
        return cmp([](A u, A v) { return u > v; });
      case BinaryOp::Ge:
        return cmp([](A u, A v) { return u >= v; });
    }
  });
}

void bias_gelu(const Tensor& x, const Tensor& bias, const Out& out, bool tanh) {
  dispatch_floating(x.dtype(), "bias_gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    if (tanh)
      map<T, T, T>(
          out, [](A v, A b) { return kernels::gelu_tanh_f(v + b); }, x, bias);
    else
      map<T, T, T>(
          out, [](A v, A b) { return kernels::gelu_erf_f(v + b); }, x, bias);
  });
}

void bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias, const Out& grad_in, bool tanh) {
  dispatch_floating(x.dtype(), "bias_gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    if (tanh)
      map<T, T, T, T>(
          grad_in, [](A g, A v, A b) { return g * kernels::gelu_tanh_grad(v + b); }, grad, x, bias);
    else
      map<T, T, T, T>(
          grad_in, [](A g, A v, A b) { return g * kernels::gelu_erf_grad(v + b); }, grad, x, bias);
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Out& out) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, bool, T, T>(
        out, [](bool c, auto u, auto v) { return c ? u : v; }, cond, a, b);
  });
}

void dropout(const Tensor& x, const Out& out, double p, uint64_t seed, uint64_t offset) {
  // x and out are contiguous; element i keeps when its uniform draw is >= p.
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
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

}  // namespace mg::cpu::MG_CPU_ISA_NS

namespace mg::cpu::MG_CPU_ISA_NS {

void bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, const Out& out, double p,
                      uint64_t seed, uint64_t offset) {
  dispatch_floating(x.dtype(), "bias_dropout_add", [&](auto tag) {
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
