// Math shared by the CPU and CUDA backends: one formula, compiled for both.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MG_HD __host__ __device__ __forceinline__
#else
#define MG_HD inline
#endif

namespace mg::kernels {

// Philox4x32-10 (Salmon et al. 2011): four 32-bit random words per (key, counter).
struct Philox4 {
  uint32_t v[4];
};
MG_HD Philox4 philox(uint64_t seed, uint64_t counter) {
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Element i of a stream draws word i % 4 of block offset/4 + i/4, so any split of the
// elements across threads or devices yields the same numbers.
MG_HD uint32_t random_word(uint64_t seed, uint64_t offset, uint64_t i) {
  return philox(seed, (offset + i) >> 2).v[(offset + i) & 3];
}
// Uniform in [0, 1) with 24 random bits.
MG_HD float random_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  return float(random_word(seed, offset, i) >> 8) * (1.0f / 16777216.0f);
}
// Standard normal by Box-Muller over the pair of words (2i, 2i + 1).
MG_HD float random_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  float u1 = (float(random_word(seed, offset, 2 * i) >> 8) + 1.0f) * (1.0f / 16777216.0f);
  float u2 = float(random_word(seed, offset, 2 * i + 1) >> 8) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

// ---- activation formulas (forward, and derivative w.r.t. the input)
#if !defined(__CUDA_ARCH__)
// On the host, unqualified exp/erf/tanh would find only C's double versions: float math would
// run in double, several times slower. The device pass has its own float overloads.
using std::erf;
using std::exp;
using std::tanh;
#endif
// tanh inside the activation formulas. For float on the host it is Eigen's branch-free 13/6
// rational approximation (generic_fast_tanh_float: a couple of ulps on [-8, 8], +-1 beyond), so
// loops over it vectorize: libm's scalar tanhf took a fifth of a small GPT's training step.
template <class T>
MG_HD T act_tanh(T x) {
  return tanh(x);
}
#if !defined(__CUDACC__)
template <>
inline float act_tanh(float a) {
  const float x = a < -7.99881172f ? -7.99881172f : (a > 7.99881172f ? 7.99881172f : a), x2 = x * x;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = x2 * p + -8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  const float t = (a < 0.0004f && a > -0.0004f) ? a : x * p / q;     // tanh(x) ~ x near 0
  return a >= 7.99881172f ? 1.0f : (a <= -7.99881172f ? -1.0f : t);  // exactly +-1 past the clamp
}
#endif
template <class T>
MG_HD T sigmoid_f(T x) {
  return T(1) / (T(1) + exp(-x));
}
template <class T>
MG_HD T gelu_erf_f(T x) {
  return T(0.5) * x * (T(1) + erf(x * T(0.7071067811865476)));
}
template <class T>
MG_HD T gelu_erf_grad(T x) {
  T cdf = T(0.5) * (T(1) + erf(x * T(0.7071067811865476)));
  T pdf = exp(T(-0.5) * x * x) * T(0.3989422804014327);
  return cdf + x * pdf;
}
template <class T>
MG_HD T gelu_tanh_f(T x) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  return T(0.5) * x * (T(1) + act_tanh(k * (x + c * x * x * x)));
}
template <class T>
MG_HD T gelu_tanh_grad(T x) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  T th = act_tanh(k * (x + c * x * x * x));
  return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * k * (T(1) + T(3) * c * x * x);
}
template <class T>
MG_HD T silu_f(T x) {
  return x * sigmoid_f(x);
}
template <class T>
MG_HD T silu_grad(T x) {
  T s = sigmoid_f(x);
  return s * (T(1) + x * (T(1) - s));
}

}  // namespace mg::kernels
