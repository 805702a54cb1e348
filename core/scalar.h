// A number passed to an op, remembering whether it was written as an integer, a float or a
// bool, so type promotion follows PyTorch (int tensor + 1 stays int; + 1.5 becomes float).
#pragma once
#include <cstdint>
#include <type_traits>

#include <memgrad/core/dtype.h>

namespace mg {

struct Scalar {
  enum class Kind : uint8_t { Bool, Integral, Floating };
  double value = 0;
  Kind kind = Kind::Floating;

  Scalar() = default;
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v)
      : value(double(v)),
        kind(std::is_same_v<T, bool> ? Kind::Bool
             : std::is_integral_v<T> ? Kind::Integral
                                     : Kind::Floating) {}

  // The dtype of `t op scalar` for a tensor of dtype `t`.
  DType result_type_with(DType t) const {
    if (kind == Kind::Floating && !is_floating(t)) return kFloat32;
    if (kind == Kind::Integral && t == kBool) return kInt64;
    return t;
  }
};

}  // namespace mg
