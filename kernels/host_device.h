// Math shared by the CPU and CUDA backends: one formula, compiled for both.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define MG_HD __host__ __device__ __forceinline__
#else
#define MG_HD inline
#endif

namespace mg::kernels {

// A double scalar (a unary op's parameter, a binary op's alpha, a fill value) as arithmetic type A:
// integers through int64, so that -2 in a uint8 op wraps to 254 as integer arithmetic does (a double
// outside an integer type's range has no defined conversion: x86 happens to wrap, the device saturates).
template <class A>
MG_HD A scalar_as(double v) {
  if constexpr (std::is_integral_v<A> && !std::is_same_v<A, bool>)
    return A(int64_t(v));
  else
    return A(v);
}

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
  const uint64_t n = offset + i;
  const Philox4 r = philox(seed, n >> 2);
  // Selected, not indexed: an index known only at run time puts r in local memory on the GPU.
  const uint32_t k = uint32_t(n & 3);
  return k == 0 ? r.v[0] : k == 1 ? r.v[1] : k == 2 ? r.v[2] : r.v[3];
}
// Uniform in [0, 1) with the 24 high bits of a random word.
MG_HD float uniform_from_word(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }
MG_HD float random_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  return uniform_from_word(random_word(seed, offset, i));
}
// Standard normal by Box-Muller over the pair of words (2i, 2i + 1).
MG_HD float random_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  float u1 = (float(random_word(seed, offset, 2 * i) >> 8) + 1.0f) * (1.0f / 16777216.0f);
  float u2 = float(random_word(seed, offset, 2 * i + 1) >> 8) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

}  // namespace mg::kernels
