#include <memgrad/kernels/quantize8bit.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mg::kernels::quant {

namespace {

// torch.linspace(0.1, 1, n) in float32 as its CPU kernel computes it: a float step, each value one
// fused multiply-add from the nearer end.
std::vector<float> linspace(int n) {
  const float start = 0.1f, end = 1.0f, step = (end - start) / float(n - 1);
  std::vector<float> r(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k)
    r[size_t(k)] = k < n / 2 ? std::fma(step, float(k), start) : std::fma(-step, float(n - k - 1), end);
  return r;
}

DynamicMap make_map(bool is_signed) {
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {  // the decade 10^(i - 6)
    const std::vector<float> b = linspace((is_signed ? 1 << i : 2 << i) + 1);
    const float scale = float(std::pow(10.0, i - 6));
    for (size_t k = 0; k + 1 < b.size(); ++k) {
      const float v = scale * ((b[k] + b[k + 1]) / 2.0f);
      data.push_back(v);
      if (is_signed) data.push_back(-v);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  std::sort(data.begin(), data.end());
  DynamicMap m;
  for (int i = 0; i < kCodes; ++i) m.value[i] = data[size_t(i)];
  for (int i = 0; i + 1 < kCodes; ++i) m.mid[i] = (m.value[i] + m.value[i + 1]) * 0.5f;
  m.mid[kCodes - 1] = std::numeric_limits<float>::infinity();
  m.negatives = 0;
  while (m.negatives < kCodes && std::signbit(m.value[m.negatives])) ++m.negatives;
  return m;
}

}  // namespace

const DynamicMap& dynamic_map(bool is_signed) {
  static const DynamicMap maps[2] = {make_map(false), make_map(true)};
  return maps[is_signed];
}

Adam8bitCoeffs adam8bit_coeffs(const Adam8bitScalars& s) {
  const double t = double(s.step);
  return Adam8bitCoeffs(s, 1 - std::pow(s.beta1, t), std::sqrt(1 - std::pow(s.beta2, t)));
}

}  // namespace mg::kernels::quant
