#include "emulated_harness.h"

#include <cmath>
#include <limits>
#include <random>

namespace emu {

namespace {
// The span of storage elements the view touches: [lo, hi).
std::pair<int64_t, int64_t> span_of(const Tensor& t) {
  if (!t.defined() || t.numel() == 0)
    return {t.defined() ? t.storage_offset() : 0, t.defined() ? t.storage_offset() : 0};
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi + 1};
}
}  // namespace

DeviceTensor::DeviceTensor(const char* name, const Tensor& t, bool copy) : host_(t) {
  if (!t.defined()) return;
  const auto [lo, hi] = span_of(t);
  const size_t es = t.element_size();
  lo_ = lo;
  first_ = size_t(t.storage_offset() - lo) * es;
  const auto* first = static_cast<const unsigned char*>(t.storage()->data()) + lo * int64_t(es);
  const size_t n = size_t(hi - lo) * es;
  bytes_ = copy ? std::make_unique<Buffer<unsigned char>>(name, std::vector<unsigned char>(first, first + n))
                : std::make_unique<Buffer<unsigned char>>(name, n);
}
DeviceTensor::DeviceTensor(const char* name, const Tensor& t) : DeviceTensor(name, t, true) {}
DeviceTensor DeviceTensor::output(const char* name, const Tensor& t) { return DeviceTensor(name, t, false); }

void DeviceTensor::download() const {
  if (!host_.defined() || bytes_->size() == 0) return;
  std::memcpy(static_cast<char*>(host_.storage()->data()) + lo_ * int64_t(host_.element_size()), bytes_->data(),
              bytes_->size());
}

void check_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  int64_t bad = 0, first = -1;
  if (!mg::is_floating(want.dtype())) {
    const std::vector<int64_t> g = got.to_vector<int64_t>(), w = want.to_vector<int64_t>();
    for (size_t i = 0; i < w.size(); ++i)
      if (g[i] != w[i] && bad++ == 0) first = int64_t(i);
    if (bad)
      FAIL_CHECK(bad << " of " << w.size() << " differ, first at " << first << ": " << g[size_t(first)]
                     << " != " << w[size_t(first)]);
    return;
  }
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  const bool exact = rtol == 0 && atol == 0;  // -0 and 0 differ too
  for (size_t i = 0; i < w.size(); ++i) {
    const bool same = std::isnan(w[i])   ? std::isnan(g[i])
                      : std::isinf(w[i]) ? g[i] == w[i]
                      : exact            ? g[i] == w[i] && std::signbit(g[i]) == std::signbit(w[i])
                                         : std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]);
    if (!same && bad++ == 0) first = int64_t(i);
  }
  if (bad)
    FAIL_CHECK(bad << " of " << w.size() << " differ, first at " << first << ": " << g[size_t(first)]
                   << " != " << w[size_t(first)]);
}

double rtol_for(DType dtype, double factor) {
  const double unit = dtype == mg::kFloat16    ? 1.0 / 1024
                      : dtype == mg::kBFloat16 ? 1.0 / 128
                      : dtype == mg::kFloat64  ? 1e-13
                                               : 4e-6;
  return unit * factor;
}

Tensor uniform(const Shape& shape, DType dtype, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(size_t(mg::numel_of(shape)));
  for (double& x : v) x = u(rng);
  return mg::tensor(v, shape, mg::kFloat64).to(dtype);
}

Tensor with_edges(const Shape& shape, DType dtype, double lo, double hi, uint64_t seed) {
  std::vector<double> v = uniform(shape, mg::kFloat64, lo, hi, seed).to_vector<double>();
  const double denormal = dtype == mg::kFloat16    ? std::ldexp(1.0, -24)
                          : dtype == mg::kBFloat16 ? std::ldexp(1.0, -133)
                          : dtype == mg::kFloat32  ? double(std::numeric_limits<float>::denorm_min())
                                                   : std::numeric_limits<double>::denorm_min();
  const double largest = dtype == mg::kFloat16    ? 65504.0
                         : dtype == mg::kBFloat16 ? 3.3895313892515355e38
                         : dtype == mg::kFloat32  ? double(std::numeric_limits<float>::max())
                                                  : std::numeric_limits<double>::max();
  const double inf = std::numeric_limits<double>::infinity();
  const double edges[] = {0.0, -0.0, inf, -inf, std::nan(""), denormal, -denormal, largest, -largest};
  for (size_t i = 0; i < v.size() && i < std::size(edges); ++i) v[i] = edges[i];
  return mg::tensor(v, shape, mg::kFloat64).to(dtype);
}

Tensor ints(const Shape& shape, DType dtype, int64_t lo, int64_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> u(lo, hi - 1);
  std::vector<int64_t> v(size_t(mg::numel_of(shape)));
  for (int64_t& x : v) x = u(rng);
  return mg::tensor(v, shape, mg::kInt64).to(dtype);
}

std::string name_of(DType dtype) { return mg::dtype_name(dtype); }

const std::vector<DType>& floating_dtypes() {
  static const std::vector<DType> all = {mg::kFloat32, mg::kFloat16, mg::kBFloat16, mg::kFloat64};
  return all;
}

}  // namespace emu
