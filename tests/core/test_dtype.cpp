// dtypes: half/bfloat16 conversions (exhaustive round trips, round-to-nearest-even against an
// independent nearest-value search), storage sizes, and PyTorch's type-promotion rules.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <memgrad/memgrad.h>

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Half value of a bit pattern computed with ldexp, independently of mg::half_to_float.
double half_value(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double mag = exp == 0 ? std::ldexp(double(man), -24) : std::ldexp(double(1024 + man), exp - 25);
  if (exp == 31) mag = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  return sign ? -mag : mag;
}

// The nearest half to `f` by searching the sorted non-negative finite halves; ties go to the
// even pattern; past the midpoint between 65504 and 2^16 the result is infinity.
uint16_t reference_float_to_half(float f) {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h < 0x7c00; ++h) v.push_back(half_value(uint16_t(h)));
    return v;
  }();
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7c00;
  auto it = std::lower_bound(values.begin(), values.end(), a);
  if (it == values.end()) return sign | 0x7bff;  // between 65504 and the overflow midpoint
  uint16_t hi = uint16_t(it - values.begin());
  if (*it == a || hi == 0) return sign | hi;
  uint16_t lo = hi - 1;
  double dlo = a - values[lo], dhi = values[hi] - a;
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

// bfloat16 by rounding the float's bits to the upper 16 with ties to even, done in 64-bit.
uint16_t reference_float_to_bfloat16(float f) {
  uint64_t u = to_bits(f), lower = u & 0xffff, upper = u >> 16;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) ++upper;
  return uint16_t(upper);
}

}  // namespace

TEST_CASE("dtype: sizes and names") {
  CHECK(mg::dtype_size(mg::kBool) == 1);
  CHECK(mg::dtype_size(mg::kInt32) == 4);
  CHECK(mg::dtype_size(mg::kInt64) == 8);
  CHECK(mg::dtype_size(mg::kFloat16) == 2);
  CHECK(mg::dtype_size(mg::kBFloat16) == 2);
  CHECK(mg::dtype_size(mg::kFloat32) == 4);
  CHECK(mg::dtype_size(mg::kFloat64) == 8);
  CHECK(std::string(mg::dtype_name(mg::kBFloat16)) == "bfloat16");
  CHECK(std::string(mg::dtype_name(mg::kFloat16)) == "float16");
  CHECK(mg::is_floating(mg::kBFloat16));
  CHECK_FALSE(mg::is_floating(mg::kInt64));
  CHECK(mg::is_half(mg::kFloat16));
  CHECK_FALSE(mg::is_half(mg::kFloat32));
}

TEST_CASE("float16: all 65536 patterns round-trip through float") {
  int nans = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = mg::half_to_float(uint16_t(h));
    double want = half_value(uint16_t(h));
    if (std::isnan(want)) {
      ++nans;
      REQUIRE(std::isnan(f));
      REQUIRE(std::isnan(mg::half_to_float(mg::float_to_half(f))));
      continue;
    }
    REQUIRE(double(f) == want);
    REQUIRE(std::signbit(f) == bool(h & 0x8000));  // -0 stays -0
    REQUIRE(mg::float_to_half(f) == h);
  }
  CHECK(nans == 2 * 1023);
}

TEST_CASE("float16: rounding to nearest even, subnormals, overflow") {
  CHECK(mg::float_to_half(1.0f) == 0x3c00);
  CHECK(mg::float_to_half(-2.0f) == 0xc000);
  CHECK(mg::float_to_half(65504.0f) == 0x7bff);  // largest finite half
  CHECK(mg::float_to_half(65519.996f) == 0x7bff);
  CHECK(mg::float_to_half(65520.0f) == 0x7c00);  // the midpoint to 2^16 ties to even: infinity
  CHECK(mg::float_to_half(-65520.0f) == 0xfc00);
  CHECK(mg::float_to_half(1e10f) == 0x7c00);
  CHECK(mg::float_to_half(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(mg::float_to_half(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(std::isnan(mg::half_to_float(mg::float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  // Ties between neighbours 1 and 1 + 2^-10: 1 + 2^-11 goes down to the even 1.0, 1 + 3*2^-11 up to 1 + 2^-9.
  CHECK(mg::float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(mg::float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(mg::float_to_half(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3c01);
  CHECK(mg::float_to_half(2049.0f) == 0x6800);  // 2048 (even) vs 2050
  CHECK(mg::float_to_half(2051.0f) == 0x6802);  // 2050 vs 2052 (even)
  // Subnormals: the smallest is 2^-24; half of it ties to 0, a bit more rounds up.
  CHECK(mg::float_to_half(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(mg::float_to_half(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(mg::float_to_half(-std::ldexp(1.0f, -25)) == 0x8000);
  CHECK(mg::float_to_half(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(mg::float_to_half(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 * 2^-24 ties to 2 * 2^-24
  CHECK(mg::float_to_half(std::ldexp(5.0f, -25)) == 0x0002);     // 2.5 * 2^-24 ties to 2 * 2^-24
  CHECK(mg::float_to_half(std::ldexp(1023.0f, -24)) == 0x03ff);  // largest subnormal
  CHECK(mg::float_to_half(std::ldexp(2047.0f, -25)) == 0x0400);  // rounds up into the normals
  CHECK(mg::float_to_half(std::ldexp(1.0f, -14)) == 0x0400);     // smallest normal
  CHECK(mg::float_to_half(1e-10f) == 0x0000);
  CHECK(mg::float_to_half(0.1f) == 0x2e66);
}

TEST_CASE("float16: float -> half matches a nearest-value search on every midpoint and a float sweep") {
  // Every midpoint between neighbouring finite halves, and the floats just either side of it.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    float mid = float((half_value(uint16_t(h)) + half_value(uint16_t(h + 1))) / 2);  // exact in float
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      REQUIRE(mg::float_to_half(f) == reference_float_to_half(f));
      REQUIRE(mg::float_to_half(-f) == reference_float_to_half(-f));
    }
  }
  // A sweep over float bit patterns (both signs), up to infinity.
  for (uint32_t u = 0; u < 0x7f800000u; u += 4099) {
    float f = from_bits(u);
    REQUIRE(mg::float_to_half(f) == reference_float_to_half(f));
    REQUIRE(mg::float_to_half(-f) == reference_float_to_half(-f));
  }
}

TEST_CASE("bfloat16: conversions") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = mg::bfloat16_to_float(uint16_t(b));
    REQUIRE(to_bits(f) == b << 16);  // exact widening
    if (std::isnan(f))
      REQUIRE(std::isnan(mg::bfloat16_to_float(mg::float_to_bfloat16(f))));
    else
      REQUIRE(mg::float_to_bfloat16(f) == b);
  }
  CHECK(mg::float_to_bfloat16(1.0f) == 0x3f80);
  CHECK(mg::float_to_bfloat16(from_bits(0x3f808000)) == 0x3f80);  // tie, 0x3f80 is even
  CHECK(mg::float_to_bfloat16(from_bits(0x3f818000)) == 0x3f82);  // tie, 0x3f82 is even
  CHECK(mg::float_to_bfloat16(from_bits(0x3f808001)) == 0x3f81);
  CHECK(mg::float_to_bfloat16(from_bits(0x3f807fff)) == 0x3f80);
  CHECK(mg::float_to_bfloat16(3.14159265f) == 0x4049);                        // 3.140625
  CHECK(mg::float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to infinity
  CHECK(mg::float_to_bfloat16(from_bits(0x7f7f7fff)) == 0x7f7f);              // largest finite stays
  CHECK(mg::float_to_bfloat16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(mg::float_to_bfloat16(from_bits(0x00008000)) == 0x0000);  // subnormal tie to even 0
  CHECK(mg::float_to_bfloat16(from_bits(0x00018000)) == 0x0002);
  CHECK(mg::float_to_bfloat16(from_bits(0x80008001)) == 0x8001);
  // A signalling NaN whose payload sits only in the low bits must stay NaN (not become infinity).
  CHECK(std::isnan(mg::bfloat16_to_float(mg::float_to_bfloat16(from_bits(0x7f800001)))));
  CHECK(std::isnan(mg::bfloat16_to_float(mg::float_to_bfloat16(from_bits(0xffc00000)))));
  for (uint32_t u = 0; u < 0x7f800000u; u += 4099) {
    REQUIRE(mg::float_to_bfloat16(from_bits(u)) == reference_float_to_bfloat16(from_bits(u)));
    REQUIRE(mg::float_to_bfloat16(from_bits(u | 0x80000000u)) ==
            reference_float_to_bfloat16(from_bits(u | 0x80000000u)));
  }
}

TEST_CASE("half tensors: two bytes per element, values rounded on store") {
  auto h = mg::tensor(std::vector<float>{0.1f, 1.0f + std::ldexp(1.0f, -11), 70000.0f, -3.0f}, {4}, mg::kFloat16);
  CHECK(h.dtype() == mg::kFloat16);
  CHECK(h.element_size() == 2);
  CHECK(h.nbytes() == 8);
  CHECK(h.storage()->nbytes() == 8);
  auto bits = h.data_ptr<mg::Half>();
  CHECK(bits[0].bits == 0x2e66);
  CHECK(bits[1].bits == 0x3c00);
  CHECK(bits[2].bits == 0x7c00);
  CHECK(bits[3].bits == 0xc200);
  CHECK(h.to_vector<float>()[0] == mg::half_to_float(0x2e66));

  auto b = mg::full({3, 5}, 3.14159265, mg::kBFloat16);
  CHECK(b.nbytes() == 30);
  for (float v : b.to_vector<float>()) CHECK(v == 3.140625f);
  auto back = b.to(mg::kFloat32);
  CHECK(back.dtype() == mg::kFloat32);
  CHECK(back.nbytes() == 60);
}

TEST_CASE("promote_types: PyTorch's table") {
  using mg::promote_types;
  const mg::DType all[] = {mg::kBool, mg::kInt32, mg::kInt64, mg::kFloat16, mg::kBFloat16, mg::kFloat32, mg::kFloat64};
  for (auto a : all) {
    CHECK(promote_types(a, a) == a);
    CHECK(promote_types(mg::kBool, a) == a);  // bool is the lowest
    for (auto b : all) CHECK(promote_types(a, b) == promote_types(b, a));
  }
  CHECK(promote_types(mg::kInt32, mg::kInt64) == mg::kInt64);
  CHECK(promote_types(mg::kInt64, mg::kFloat16) == mg::kFloat16);  // any float beats any integer
  CHECK(promote_types(mg::kInt64, mg::kBFloat16) == mg::kBFloat16);
  CHECK(promote_types(mg::kInt32, mg::kFloat32) == mg::kFloat32);
  CHECK(promote_types(mg::kFloat16, mg::kBFloat16) == mg::kFloat32);  // neither holds the other
  CHECK(promote_types(mg::kFloat16, mg::kFloat32) == mg::kFloat32);
  CHECK(promote_types(mg::kBFloat16, mg::kFloat64) == mg::kFloat64);
  CHECK(promote_types(mg::kFloat32, mg::kFloat64) == mg::kFloat64);
}

TEST_CASE("result types of ops: dimensioned tensors, 0-d tensors and Scalars") {
  auto i32 = mg::ones({2}, mg::kInt32), i64 = mg::ones({2}, mg::kInt64), f16 = mg::ones({2}, mg::kFloat16);
  auto f32 = mg::ones({2}), bl = mg::ones({2}, mg::kBool), bf16 = mg::ones({2}, mg::kBFloat16);
  auto f64_0d = mg::scalar_tensor(1.0, mg::kFloat64), i64_0d = mg::scalar_tensor(1, mg::kInt64);
  auto f32_0d = mg::scalar_tensor(1.0), bool_0d = mg::scalar_tensor(true, mg::kBool);
  // Dimensioned tensors promote with each other.
  CHECK((i32 + i64).dtype() == mg::kInt64);
  CHECK((i32 + f16).dtype() == mg::kFloat16);
  CHECK((f16 + bf16).dtype() == mg::kFloat32);
  CHECK((bl + bl).dtype() == mg::kBool);
  CHECK((bl + i32).dtype() == mg::kInt32);
  // A 0-d tensor decides only when its category (bool < integer < float) is higher.
  CHECK((f16 + f64_0d).dtype() == mg::kFloat16);
  CHECK((i32 + i64_0d).dtype() == mg::kInt32);
  CHECK((i32 + f64_0d).dtype() == mg::kFloat64);
  CHECK((bl + i64_0d).dtype() == mg::kInt64);
  CHECK((i64 + bool_0d).dtype() == mg::kInt64);
  CHECK((f64_0d + f32_0d).dtype() == mg::kFloat64);  // two 0-d tensors promote normally
  CHECK((i64_0d + f32_0d).dtype() == mg::kFloat32);
  // Scalars: an integer keeps the tensor's dtype, a float turns integers into float32.
  CHECK((i32 + 1).dtype() == mg::kInt32);
  CHECK((i32 * 3).dtype() == mg::kInt32);
  CHECK((i32 + 1.5).dtype() == mg::kFloat32);
  CHECK((i64 * 0.5).dtype() == mg::kFloat32);
  CHECK((f16 + 1.5).dtype() == mg::kFloat16);
  CHECK((bf16 * 2).dtype() == mg::kBFloat16);
  CHECK((bl + 1).dtype() == mg::kInt64);
  CHECK((bl + 1.0).dtype() == mg::kFloat32);
  CHECK((i64 / 2).dtype() == mg::kFloat32);  // true division
  CHECK((i32 / i32).dtype() == mg::kFloat32);
  CHECK((i32 < 2.5).dtype() == mg::kBool);
  CHECK(mg::Scalar(2).result_type_with(mg::kInt32) == mg::kInt32);
  CHECK(mg::Scalar(true).result_type_with(mg::kInt32) == mg::kInt32);
  CHECK(mg::Scalar(2.0).result_type_with(mg::kBool) == mg::kFloat32);
  CHECK(mg::Scalar(2).result_type_with(mg::kBool) == mg::kInt64);
  CHECK(mg::Scalar(2.0).result_type_with(mg::kFloat64) == mg::kFloat64);
  // Values follow the promotion: int32 + 1.5 is computed in float.
  CHECK(mg::equal(mg::tensor(std::vector<int32_t>{1, 2}) + 1.5, mg::tensor(std::vector<float>{2.5f, 3.5f})));
  // A 0-d float64 next to int32 computes in float64: 1 + 0.1 keeps float64 precision.
  CHECK((i32 + mg::scalar_tensor(0.1, mg::kFloat64)).to_vector<double>()[0] == 1.1);
}
