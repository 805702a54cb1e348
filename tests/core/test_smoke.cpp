#include <doctest/doctest.h>

#include <memgrad/memgrad.h>

TEST_CASE("smoke: add and backward") {
  auto x = mg::tensor(std::vector<float>{1, 2, 3}, {3}).requires_grad_();
  auto y = (x * x).sum();
  CHECK(y.item<float>() == doctest::Approx(14));
  y.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 4, 6});
}
