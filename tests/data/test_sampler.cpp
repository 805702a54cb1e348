// Samplers: each epoch visits every example once; the shuffled order is a function of (seed, epoch)
// alone, differs between epochs and seeds, spreads every example evenly over the positions, and
// costs no memory for any size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "expect_error.h"

using namespace mg;
using data::SequentialSampler;
using data::ShuffledSampler;

namespace {
std::vector<int64_t> order(const data::Sampler& s, int64_t epoch) {
  std::vector<int64_t> o;
  for (int64_t p = 0; p < s.size(); ++p) o.push_back(s.index(epoch, p));
  return o;
}
}  // namespace

TEST_CASE("data: the sequential sampler visits 0, 1, 2, ... every epoch") {
  SequentialSampler s(5);
  CHECK(order(s, 0) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(order(s, 7) == order(s, 0));
  expect_error<IndexError>([&] { s.index(0, 5); }, {"position 5 of epoch 0", "[0, 5)"});
  expect_error<IndexError>([&] { s.index(-1, 0); }, {"epoch >= 0"});
  expect_error<ValueError>([] { SequentialSampler(0); }, {"at least one example, got 0"});
}

TEST_CASE("data: the shuffled sampler is a permutation per epoch, drawn from (seed, epoch)") {
  for (int64_t n : {1, 2, 3, 4, 5, 15, 16, 17, 255, 1000, 4097}) {
    INFO("size " << n);
    ShuffledSampler s(n, 42);
    for (int64_t epoch : {0, 1, 9}) {
      std::vector<int64_t> o = order(s, epoch);
      std::sort(o.begin(), o.end());
      for (int64_t i = 0; i < n; ++i) REQUIRE(o[size_t(i)] == i);
    }
    CHECK(order(ShuffledSampler(n, 42), 3) == order(s, 3));  // nothing but (seed, epoch) decides it
    if (n >= 5) {
      CHECK(order(s, 0) != order(s, 1));
      CHECK(order(s, 0) != order(ShuffledSampler(n, 43), 0));
      CHECK(order(s, 0) != order(SequentialSampler(n), 0));
    }
  }
}

TEST_CASE("data: the shuffled order spreads each example evenly over the positions") {
  // Over 20,000 epochs of 10 examples, each (example, position) pair comes up 2,000 times in
  // expectation, with a standard deviation of 42: all within 5 of them.
  const int64_t n = 10, epochs = 20000;
  ShuffledSampler s(n, 7);
  std::vector<int64_t> count(size_t(n * n), 0);
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t p = 0; p < n; ++p) ++count[size_t(s.index(e, p) * n + p)];
  const double expected = double(epochs) / double(n), sd = std::sqrt(expected * (1 - 1.0 / double(n)));
  for (int64_t c : count) CHECK(std::abs(double(c) - expected) < 5 * sd);
  // Neighbours do not stay neighbours: of 99,999 successive positions of 100,000, about 1 in 10^5
  // would hold successive examples by chance.
  ShuffledSampler big(100000, 7);
  int64_t successive = 0;
  for (int64_t p = 0; p + 1 < big.size(); ++p) successive += big.index(0, p + 1) == big.index(0, p) + 1;
  CHECK(successive < 10);
}

TEST_CASE("data: a shuffled order over 10^12 examples costs no memory and stays in range") {
  const int64_t n = 1000000000000;
  ShuffledSampler s(n, 1);
  std::set<int64_t> seen;
  for (int64_t p = 0; p < 2000; ++p) {
    const int64_t i = s.index(5, p * 499999999);
    CHECK(i >= 0);
    CHECK(i < n);
    seen.insert(i);
  }
  CHECK(seen.size() == 2000);
}
