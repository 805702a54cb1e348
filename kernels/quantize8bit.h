// 8-bit block-wise state (Dettmers et al. 2021, "8-bit Optimizers via Block-wise Quantization"):
// bitsandbytes' dynamic quantization maps, the nearest-code search, and the element rule of its
// 8-bit Adam, shared by the CPU loop (kernels/cpu/adam8bit.cpp) and the CUDA kernel
// (kernels/cuda/adam8bit.cu). Both files are compiled without contracting multiply-adds, so the
// fmaf calls here are the only fused ones and the two devices agree bit for bit.
#pragma once
#include <cstdint>

#include <memgrad/kernels/host_device.h>

namespace mg::kernels::quant {

inline constexpr int64_t kBlock = 256;  // elements per absmax
inline constexpr int kCodes = 256;

// A dynamic map's 256 sorted values and the midpoints between neighbours (mid[i] between value[i]
// and value[i + 1]; mid[255] = +inf), which decide the nearest code.
struct DynamicMap {
  float value[kCodes];
  float mid[kCodes];
  int negatives;  // the values with their sign bit set: codes [0, negatives)
};
// bitsandbytes.functional.create_dynamic_map(signed) with its defaults (7 exponent bits, 8 bits):
// for each decade 10^-6 .. 10^0, the means of linspace(0.1, 1, k + 1) scaled to it (k = 2^i codes
// for the signed map, which holds them with both signs, 2^(i+1) for the unsigned one), then 0 and
// 1, sorted. Computed in float32 as bitsandbytes computes it with torch, so the values are bitwise
// its own (tests/optim checks them against bitsandbytes' output). Host only.
const DynamicMap& dynamic_map(bool is_signed);

// The code of the map value nearest x: the number of midpoints below x, so a tie goes to the
// lower code; NaN gives 0. Eight steps of a branch-free binary search, each one search_step (the CPU
// takes each step for a block of values at once, so that the loads become vector gathers).
MG_HD int search_step(const float* mid, int k, int s, float x) { return k + (mid[k + s - 1] < x ? s : 0); }
MG_HD uint8_t nearest_code(const float* mid, float x) {
  int k = 0;
  for (int s = kCodes / 2; s > 0; s >>= 1) k = search_step(mid, k, s, x);
  return uint8_t(k);
}
// The value a moment is quantized as: m / absmax, or 0 in an all-zero block (absmax 0).
MG_HD float normalized(float m, float absmax) { return absmax > 0 ? m / absmax : 0.0f; }

// The first moment's code as bitsandbytes stores it: the nearest code, moved one code towards m's
// sign when that value has the other sign (so a small negative moment never becomes zero).
MG_HD bool sign_bit(float x) {  // -0 too
#ifdef __CUDA_ARCH__
  return signbit(x);
#else
  return std::signbit(x);
#endif
}
MG_HD uint8_t keep_sign(const DynamicMap& map, int code, float m) {  // branch-free: signs are coin flips
  return uint8_t(code + int((code < map.negatives) != sign_bit(m)) * (m > 0 ? 1 : -1));
}
MG_HD uint8_t quantize_signed(const DynamicMap& map, float m, float absmax) {
  return keep_sign(map, nearest_code(map.mid, normalized(m, absmax)), m);
}
MG_HD uint8_t quantize_unsigned(const DynamicMap& map, float v, float absmax) {
  return nearest_code(map.mid, normalized(v, absmax));
}

// Per-tensor constants of bitsandbytes' Adam step t (its 8-bit block-wise kernel, and its 32-bit
// kernel for tensors too small to quantize), in float32 as it computes them.
struct Adam8bitScalars {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  bool quantized;  // false: exp_avg and exp_avg_sq are float32 tensors (below min_8bit_size)
};
struct Adam8bitCoeffs {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, eps_c2, decay;
  bool decayed;
  MG_HD explicit Adam8bitCoeffs(const Adam8bitScalars& s, double correction1, double correction2)
      : beta1(float(s.beta1)),
        one_minus_beta1(float(1 - s.beta1)),
        beta2(float(s.beta2)),
        one_minus_beta2(float(1 - s.beta2)),
        step_size(float(-s.lr * correction2 / correction1)),
        eps_c2(float(s.eps * correction2)),
        decay(float(1 - s.lr * s.weight_decay)),
        decayed(s.weight_decay > 0) {}
};
// Host: the coefficients of step s.step (correction1 = 1 - beta1^t, correction2 = sqrt(1 - beta2^t)).
Adam8bitCoeffs adam8bit_coeffs(const Adam8bitScalars& s);

// The moments' update: m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2.
MG_HD void adam8bit_moments(float g, float& m, float& v, const Adam8bitCoeffs& c) {
  v = fmaf(v, c.beta2, c.one_minus_beta2 * g * g);
  m = fmaf(m, c.beta1, c.one_minus_beta1 * g);
}
// The parameter's update from the new (unquantized) moments; the decoupled decay comes after it,
// as in bitsandbytes (for its Adam and AdamW alike).
MG_HD float adam8bit_param(float p, float m, float v, const Adam8bitCoeffs& c) {
  p = fmaf(c.step_size, m / (sqrtf(v) + c.eps_c2), p);
  return c.decayed ? p * c.decay : p;
}

}  // namespace mg::kernels::quant
