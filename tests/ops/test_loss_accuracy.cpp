// Cross-entropy's float32 sums over many classes stay accurate: the kernel adds exp(x - max) in
// SIMD lanes of float within blocks and the blocks in double. Logits that make every term 0.1
// (not representable: each float addition rounds) over 2^20 classes: one float accumulator per
// lane would drift by about 1e-3 of the sum; the blocked sum stays within a few ulps.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <memgrad/memgrad.h>

TEST_CASE("cross_entropy: float32 sums over 2^20 classes match float64") {
  const int64_t C = int64_t(1) << 20;
  const float low = std::log(0.1f);
  std::vector<float> v(size_t(2 * C), low);
  v[0] = 0;              // row 0: the max at its target
  v[size_t(C) + 7] = 0;  // row 1: the max elsewhere, the target low
  mg::Tensor logits = mg::tensor(v, {2, C}).requires_grad_();
  mg::Tensor target = mg::tensor(std::vector<int64_t>{0, 3}, {2});
  mg::Tensor loss = mg::cross_entropy(logits, target, -100, 0.0, mg::Reduction::None);
  loss.sum().backward();
  // float64 from the same float inputs
  const double term = std::exp(double(low)), sum = 1 + double(C - 1) * term, lse = std::log(sum);
  const std::vector<double> got = loss.to_vector<double>();
  CHECK(got[0] == doctest::Approx(lse).epsilon(2e-7));
  CHECK(got[1] == doctest::Approx(lse - double(low)).epsilon(2e-7));
  const std::vector<double> g = logits.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(1 / sum - 1).epsilon(2e-7));
  CHECK(g[5] == doctest::Approx(term / sum).epsilon(2e-6));
  CHECK(g[size_t(C) + 3] == doctest::Approx(term / sum - 1).epsilon(2e-7));
  CHECK(g[size_t(C) + 7] == doctest::Approx(1 / sum).epsilon(2e-6));
}
