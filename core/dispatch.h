// Dtype dispatch: from a runtime DType to the C++ type that stores it, and the arithmetic type
// (float for the 16-bit types) with its load/store conversions. Shared by the CPU and CUDA
// kernels and by Tensor's element access (MLX's dtype_utils.h plays this part).
#pragma once
#include <type_traits>

#include <memgrad/core/dtype.h>
#include <memgrad/core/error.h>

namespace mg {

template <class T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) for the C++ type T of `t`.
template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case kBool:
      return f(Tag<bool>{});
    case kUInt8:
      return f(Tag<uint8_t>{});
    case kInt8:
      return f(Tag<int8_t>{});
    case kInt32:
      return f(Tag<int32_t>{});
    case kInt64:
      return f(Tag<int64_t>{});
    case kFloat16:
      return f(Tag<Half>{});
    case kBFloat16:
      return f(Tag<BFloat16>{});
    case kFloat32:
      return f(Tag<float>{});
    case kFloat64:
      return f(Tag<double>{});
  }
}
// Floating dtypes only; others raise DTypeError naming `op` (and f is never instantiated for them).
template <class F>
void dispatch_floating(DType t, const char* op, F&& f) {
  MG_CHECK(is_floating(t), DTypeError, op, ": expected a floating dtype, got ", t);
  dispatch(t, [&](auto tag) {
    if constexpr (!std::is_integral_v<typename decltype(tag)::type>) f(tag);
  });
}

// Arithmetic type for storage type T: float for the 16-bit types.
template <class T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <class T>
using opmath_t = typename OpMath<T>::type;

template <class T>
inline opmath_t<T> load(const T& v) {
  if constexpr (std::is_same_v<T, Half>)
    return half_to_float(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bfloat16_to_float(v.bits);
  else
    return v;
}
template <class T, class V>
inline T store(V v) {
  if constexpr (std::is_same_v<T, Half>)
    return Half{float_to_half(float(v))};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16{float_to_bfloat16(float(v))};
  else if constexpr (std::is_same_v<T, bool>)
    return v != V(0);
  else
    return T(v);
}

// Expands a parameter pack into that many T (N operands of an N-ary kernel).
template <class, class T>
using Each = T;

}  // namespace mg
