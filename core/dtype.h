// Element types. Half types are stored as 16-bit patterns and converted on load/store.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iosfwd>

namespace mg {

// Ordered by promotion rank (promote_types): bool < integers (by range) < floating.
enum class DType : uint8_t { Bool, UInt8, Int8, Int32, Int64, Float16, BFloat16, Float32, Float64 };

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", ...
bool is_floating(DType t);
bool is_half(DType t);  // float16 or bfloat16
// PyTorch's promote_types: bool < integers < floating; float16 + bfloat16 -> float32; uint8 + int8
// -> int32 (PyTorch's int16, which memgrad lacks: the smallest type here holding both ranges).
DType promote_types(DType a, DType b);
// The dtype whose code (the enum's value, int(t)) is `code`: DTypeError naming the valid codes for
// any other, e.g. a code read from a file or another process.
DType dtype_from_code(int64_t code);
std::ostream& operator<<(std::ostream& os, DType t);

// 16-bit float storage types; arithmetic goes through float.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
// Conversions, inline so element loops vectorise; round to nearest even.
inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 31) return bits_to_float(sign | 0x7f800000 | (man << 13));
  if (exp == 0) return bits_to_float(sign) + (sign ? -1.f : 1.f) * float(man) * 5.9604644775390625e-8f;
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}
inline uint16_t float_to_half(float f) {
  uint32_t x = float_to_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return uint16_t(sign | 0x7e00);   // NaN
  if (ax >= 0x47800000) return uint16_t(sign | 0x7c00);  // overflows to infinity
  if (ax < 0x38800000)  // half subnormal: adding 0.5 lets the float adder round to nearest even
    return uint16_t(sign | (float_to_bits(bits_to_float(ax) + 0.5f) - 0x3f000000u));
  ax += 0xc8000fffu + ((ax >> 13) & 1);  // rebias the exponent by -112 and round
  return uint16_t(sign | (ax >> 13));
}
inline float bfloat16_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }
inline uint16_t float_to_bfloat16(float f) {
  uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // quiet NaN
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// C++ type for each dtype (Half/BFloat16 for the 16-bit types).
template <class T>
struct dtype_of;
template <>
struct dtype_of<bool> {
  static constexpr DType value = kBool;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = kUInt8;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = kInt8;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = kInt32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = kInt64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = kFloat16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = kBFloat16;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = kFloat32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = kFloat64;
};

}  // namespace mg
