// The elementwise kernels and their functors (elementwise.cu launches them; tests/cuda runs them on
// the host): the map's functors for copies and casts, fills, unary and binary ops, comparisons,
// bias_gelu and where (map.cuh's kernels apply them); the index fills (ranges, random fills with the
// CPU's counter-based generator), dropout and bias_dropout_add. Ops are switched inside the functor,
// so each dtype compiles one kernel per family.
#pragma once
#include <memgrad/kernels/backend.h>
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda::elementwise_kernels {

struct Identity {
  template <class V>
  __device__ V operator()(V v) const {
    return v;
  }
};
template <class A>
struct Constant {
  A v;
  __device__ A operator()() const { return v; }
};

// Transcendental functions; integer arguments go through double like std:: on the CPU.
template <class A>
__device__ __forceinline__ auto real(A v) {
  if constexpr (std::is_integral_v<A>)
    return double(v);
  else
    return v;
}

template <class A>
struct UnaryFn {
  UnaryOp op;
  A a, b;
  double e;
  __device__ A operator()(A v) const {
    switch (op) {
      case UnaryOp::Neg:
        return -v;
      case UnaryOp::Exp:
        return A(exp(real(v)));
      case UnaryOp::Log:
        return A(log(real(v)));
      case UnaryOp::Sqrt:
        return A(sqrt(real(v)));
      case UnaryOp::Rsqrt:
        return A(1 / sqrt(real(v)));
      case UnaryOp::Abs:
        if constexpr (std::is_unsigned_v<A>)
          return v;  // uint8
        else
          return v < A(0) ? -v : v;
      case UnaryOp::Tanh:
        return A(tanh(real(v)));
      case UnaryOp::Sigmoid:
        return A(sigmoid_f(real(v)));
      case UnaryOp::Relu:
        return v > A(0) ? v : A(0);
      case UnaryOp::GeluErf:
        return A(gelu_erf_f(real(v)));
      case UnaryOp::GeluTanh:
        return A(gelu_tanh_f(real(v)));
      case UnaryOp::Silu:
        return A(silu_f(real(v)));
      case UnaryOp::Erf:
        return A(erf(real(v)));
      case UnaryOp::PowScalar:
        return A(pow(double(v), e));
      case UnaryOp::Clamp:
        return v < a ? a : (v > b ? b : v);
      case UnaryOp::AddScalar:
        return v + a;
      case UnaryOp::MulScalar:
        return v * a;
      case UnaryOp::RsubScalar:
        return a - v;
    }
    return v;
  }
};

template <class A>
struct UnaryGradFn {
  UnaryOp op;
  UnaryParams p;
  __device__ A operator()(A g, A s) const {  // `s` is x, or the output y (kernels/unary.h)
    return with_unary_op(op, [&](auto u) { return unary_grad<decltype(u)::value>(g, s, p); });
  }
};

template <class A>
struct BinaryFn {
  BinaryOp op;
  A alpha;
  __device__ A operator()(A u, A v) const {
    switch (op) {
      case BinaryOp::Add:
        return u + alpha * v;
      case BinaryOp::Sub:
        return u - alpha * v;
      case BinaryOp::Mul:
        return u * v;
      case BinaryOp::Div:
        return u / v;
      case BinaryOp::Pow:
        return A(pow(real(u), real(v)));
      case BinaryOp::Max:
        return u != u ? u : (u > v ? u : v);
      case BinaryOp::Min:
        return u != u ? u : (u < v ? u : v);
      default:
        return A(0);
    }
  }
};

template <class A>
struct CompareFn {
  BinaryOp op;
  __device__ bool operator()(A u, A v) const {
    switch (op) {
      case BinaryOp::Eq:
        return u == v;
      case BinaryOp::Ne:
        return u != v;
      case BinaryOp::Lt:
        return u < v;
      case BinaryOp::Le:
        return u <= v;
      case BinaryOp::Gt:
        return u > v;
      case BinaryOp::Ge:
        return u >= v;
      default:
        return false;
    }
  }
};

// Wraps a functor so its arguments are first converted to A (bool and integers to int64).
template <class A, class F>
struct As {
  F f;
  template <class... V>
  __device__ auto operator()(V... v) const {
    return f(A(v)...);
  }
};

// The arithmetic type of T's elementwise ops: opmath_t, int64 for bool.
template <class T>
using arith_t = std::conditional_t<std::is_same_v<T, bool>, int64_t, opmath_t<T>>;
// The functors of unary, binary and comparison ops on T elements.
template <class T, class A = arith_t<T>>
As<A, UnaryFn<A>> unary_fn(UnaryOp op, const UnaryParams& p) {
  return {{op, scalar_as<A>(p.a), scalar_as<A>(p.b), p.a}};
}
template <class T, class A = arith_t<T>>
As<A, BinaryFn<A>> binary_fn(BinaryOp op, double alpha) {
  return {{op, scalar_as<A>(alpha)}};
}
template <class T, class A = arith_t<T>>
As<A, CompareFn<A>> compare_fn(BinaryOp op) {
  return {{op}};
}

// GELU of x + bias, and its gradient (bias_gelu).
template <class A>
struct BiasGelu {
  bool tanh;
  __device__ A operator()(A v, A b) const { return tanh ? gelu_tanh_f(v + b) : gelu_erf_f(v + b); }
};
template <class A>
struct BiasGeluGrad {
  bool tanh;
  __device__ A operator()(A g, A v, A b) const { return g * (tanh ? gelu_tanh_grad(v + b) : gelu_erf_grad(v + b)); }
};

struct Select {
  template <class U>
  __device__ U operator()(bool c, U u, U v) const {
    return c ? u : v;
  }
};

// ---- element i of a contiguous tensor from its index
template <class T, class F>
__global__ void fill_indexed_kernel(T* p, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = dstore<T>(f(i));
}
struct RangeFn {
  double start, step;
  __device__ double operator()(int64_t i) const { return start + double(i) * step; }
};
struct UniformFn {
  uint64_t seed, offset;
  double lo, hi;
  __device__ double operator()(int64_t i) const { return lo + (hi - lo) * double(random_uniform(seed, offset, i)); }
};
struct NormalFn {
  uint64_t seed, offset;
  double mean, std;
  __device__ double operator()(int64_t i) const { return mean + std * double(random_normal(seed, offset, i)); }
};
struct RandintFn {
  uint64_t seed, offset, range;
  int64_t lo;
  __device__ double operator()(int64_t i) const {
    return double(lo + int64_t((uint64_t(random_word(seed, offset, i)) * range) >> 32));
  }
};

template <class T, class A>
__global__ void dropout_kernel(const T* x, T* out, int64_t n, float p, A scale, uint64_t seed, uint64_t offset) {
  // The generator hands out offsets in whole Philox blocks, so elements 4g..4g+3 share block g:
  // one Philox evaluation serves four elements, with exactly random_uniform's arithmetic.
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups; g += int64_t(gridDim.x) * blockDim.x) {
    Philox4 r = philox(seed, (offset >> 2) + uint64_t(g));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int64_t i = g * 4 + k;
      if (i >= n) break;
      float u = (offset & 3) == 0 ? uniform_from_word(r.v[k]) : random_uniform(seed, offset, uint64_t(i));
      out[i] = dstore<T>(u >= p ? dload(x[i]) * scale : A(0));
    }
  }
}

// out = residual + dropout(x + bias) with the dropout kernel's draws and the composed ops' roundings;
// mode 0 keeps all (p = 0), 1 multiplies by 0 (p = 1), 2 draws.
template <class T, class A>
__global__ void bias_dropout_add_kernel(const T* x, const T* bias, const T* residual, T* out, int64_t n, int64_t cols,
                                        int mode, float p, A scale, uint64_t seed, uint64_t offset) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    A v = dload(dstore<T>(dload(x[i]) + dload(bias[i % cols])));
    v = mode == 0 ? v : mode == 1 ? v * A(0) : (random_uniform(seed, offset, uint64_t(i)) >= p ? v * scale : A(0));
    out[i] = dstore<T>(dload(residual[i]) + dload(dstore<T>(v)));
  }
}

}  // namespace mg::cuda::elementwise_kernels
