// Counter-based randomness: Philox4x32-10 against Random123's known answers, the counter layout
// of the random factories, seeding and offsets, distribution moments, and dropout masks.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <thread>
#include <vector>

#include <memgrad/kernels/host_device.h>
#include <memgrad/memgrad.h>

namespace {

// Philox4x32-10 written from the paper's round function, with the full 128-bit counter.
std::array<uint32_t, 4> reference_philox(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k = {k[0] + 0x9E3779B9u, k[1] + 0xBB67AE85u};
    uint64_t p0 = uint64_t(0xD2511F53u) * c[0], p1 = uint64_t(0xCD9E8D57u) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
  }
  return c;
}

struct Moments {
  double mean = 0, var = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= double(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= double(v.size() - 1);
  return m;
}

}  // namespace

TEST_CASE("philox: Random123 known answers") {
  // kat_vectors of Random123 for philox4x32_10: (counter, key) -> output.
  using A4 = std::array<uint32_t, 4>;
  CHECK(reference_philox({0, 0, 0, 0}, {0, 0}) == A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(reference_philox({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(reference_philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});

  auto r = mg::kernels::philox(0, 0);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
  // The library's (seed, counter) maps to key (seed lo, seed hi) and counter (lo, hi, 0, 0).
  uint64_t seeds[] = {1, 0x853c49e6748fea9bULL, 0xffffffffffffffffULL, 42};
  uint64_t counters[] = {0, 1, 0x123456789abcdefULL, 0xffffffffffffffffULL};
  for (auto s : seeds)
    for (auto c : counters) {
      auto got = mg::kernels::philox(s, c);
      auto want = reference_philox({uint32_t(c), uint32_t(c >> 32), 0, 0}, {uint32_t(s), uint32_t(s >> 32)});
      CHECK(A4{got.v[0], got.v[1], got.v[2], got.v[3]} == want);
    }
}

TEST_CASE("random factories draw counters [offset, offset + n) of the default generator") {
  mg::GeneratorStateGuard restore;
  mg::manual_seed(1234);
  CHECK(mg::default_generator().seed() == 1234);
  CHECK(mg::default_generator().offset() == 0);
  auto a = mg::rand({10}).to_vector<float>();
  CHECK(mg::default_generator().offset() == 12);  // rounded up to whole Philox blocks
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t word = mg::kernels::philox(1234, i / 4).v[i % 4];
    CHECK(a[i] == float(word >> 8) / 16777216.0f);
  }
  auto b = mg::rand({3}).to_vector<float>();
  for (size_t i = 0; i < b.size(); ++i) CHECK(b[i] == mg::kernels::random_uniform(1234, 12, i));
  CHECK(mg::default_generator().offset() == 16);
  auto n = mg::randn({5}).to_vector<float>();  // two words per value
  CHECK(mg::default_generator().offset() == 28);
  for (size_t i = 0; i < n.size(); ++i) {
    double u1 = (double(mg::kernels::random_word(1234, 16, 2 * i) >> 8) + 1) / 16777216.0;
    double u2 = double(mg::kernels::random_word(1234, 16, 2 * i + 1) >> 8) / 16777216.0;
    CHECK(n[i] == doctest::Approx(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2)).epsilon(1e-5));
  }
}

TEST_CASE("manual_seed reproduces; offsets advance") {
  mg::GeneratorStateGuard restore;
  mg::manual_seed(7);
  auto a1 = mg::rand({100}), b1 = mg::randn({100}), c1 = mg::randint(0, 1000, {100});
  mg::manual_seed(7);
  auto a2 = mg::rand({100}), b2 = mg::randn({100}), c2 = mg::randint(0, 1000, {100});
  CHECK(mg::equal(a1, a2));
  CHECK(mg::equal(b1, b2));
  CHECK(mg::equal(c1, c2));
  CHECK_FALSE(mg::equal(a1, mg::rand({100})));  // the next call draws new counters
  mg::manual_seed(8);
  CHECK_FALSE(mg::equal(a1, mg::rand({100})));  // another seed, another stream
  // Same values whatever the dtype: float64 holds the same 24-bit draws.
  mg::manual_seed(7);
  CHECK(mg::equal(mg::rand({100}, mg::kFloat64), a1));
  {
    mg::GeneratorStateGuard inner;
    mg::rand({64});
  }
  CHECK(mg::default_generator().offset() == 100);  // the guard restored it
}

TEST_CASE("distributions: moments and ranges over 1e5 samples") {
  mg::GeneratorStateGuard restore;
  mg::manual_seed(2024);
  const int n = 100000;
  auto u = mg::rand({n}, mg::kFloat64).to_vector<double>();
  for (double x : u) REQUIRE((x >= 0 && x < 1));
  auto mu = moments(u);
  // Bounds are 5 standard errors: sd(mean) = sqrt(1/12/n); sd(var) = sqrt((1/80 - 1/144)/n).
  CHECK(std::abs(mu.mean - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::abs(mu.var - 1.0 / 12) < 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / n));
  int below_tenth = 0;
  for (double x : u) below_tenth += x < 0.1;
  CHECK(std::abs(below_tenth - n / 10) < 5 * std::sqrt(n * 0.1 * 0.9));

  auto g = mg::randn({n}).to_vector<double>();
  auto mg_ = moments(g);
  CHECK(std::abs(mg_.mean) < 5 / std::sqrt(double(n)));
  CHECK(std::abs(mg_.var - 1) < 5 * std::sqrt(2.0 / n));
  int within1 = 0;
  for (double x : g) within1 += std::abs(x) < 1;
  CHECK(std::abs(within1 / double(n) - 0.6826894921) < 5 * std::sqrt(0.68 * 0.32 / n));

  auto ri = mg::randint(-3, 7, {n}).to_vector<int64_t>();
  std::vector<int> counts(10);
  for (auto v : ri) {
    REQUIRE((v >= -3 && v < 7));
    ++counts[size_t(v + 3)];
  }
  for (int c : counts) CHECK(std::abs(c - n / 10) < 5 * std::sqrt(n * 0.1 * 0.9));
  // A range wider than 2^31 works too.
  auto wide = mg::randint(0, int64_t(1) << 32, {1000}).to_vector<int64_t>();
  int64_t top = 0;
  for (auto v : wide) top = std::max(top, v);
  CHECK(top > (int64_t(1) << 31));
  CHECK(top < (int64_t(1) << 32));
}

TEST_CASE("dropout: kept fraction, scaling, and the same mask in backward") {
  mg::GeneratorStateGuard restore;
  mg::manual_seed(99);
  const double p = 0.3;
  auto x = (mg::rand({200, 50}) + 1.0).requires_grad_();
  auto out = mg::dropout(x, p);
  auto xv = x.to_vector<float>(), ov = out.to_vector<float>();
  size_t kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (ov[i] == 0) continue;
    ++kept;
    CHECK(ov[i] == doctest::Approx(xv[i] / (1 - p)).epsilon(1e-6));
  }
  const double n = double(xv.size());
  CHECK(std::abs(double(kept) / n - (1 - p)) < 5 * std::sqrt(p * (1 - p) / n));
  // Backward regenerates the mask: grad is 1/(1-p) where kept and 0 where dropped, = out / x.
  out.sum().backward();
  auto gv = x.grad().to_vector<float>();
  for (size_t i = 0; i < gv.size(); ++i) CHECK(gv[i] == doctest::Approx(ov[i] / xv[i]).epsilon(1e-5));
  // The same seed and offset give the same mask; the next call a different one.
  mg::manual_seed(99);
  mg::rand({200, 50});  // replay the offsets used above
  mg::Tensor again;
  {
    mg::NoGradGuard ng;
    again = mg::dropout(x, p);
  }
  CHECK(mg::equal(again, out));
  CHECK_FALSE(mg::equal(mg::dropout(x.detach(), p), out));
  // Element i keeps exactly when its uniform draw is at least p.
  mg::manual_seed(5);
  auto ones = mg::ones({64});
  auto d = mg::dropout(ones, 0.5).to_vector<float>();
  for (size_t i = 0; i < d.size(); ++i) CHECK((d[i] != 0) == (mg::kernels::random_uniform(5, 0, i) >= 0.5f));
}

TEST_CASE("dropout masks: element i keeps when its own draw is >= p, at any size and row width") {
  // The CPU kernels draw one Philox block per four elements, in chunks and per row: sizes around
  // the chunk (1024) and rows whose width is not a multiple of four start mid-block.
  const double p = 0.5;
  auto expect_mask = [&](const std::vector<float>& d, uint64_t seed) {
    size_t wrong = 0;
    for (size_t i = 0; i < d.size(); ++i) wrong += (d[i] != 0) != (mg::kernels::random_uniform(seed, 0, i) >= 0.5f);
    CHECK(wrong == 0);
  };
  mg::GeneratorStateGuard restore;
  for (int64_t n : {1, 3, 1023, 1025, 70001}) {
    CAPTURE(n);
    mg::manual_seed(uint64_t(n));
    expect_mask(mg::dropout(mg::ones({n}), p).to_vector<float>(), uint64_t(n));
  }
  for (int64_t width : {1, 5, 1027, 2503}) {
    CAPTURE(width);
    mg::manual_seed(7);
    auto x = mg::ones({40, width}), zero = mg::zeros({width});
    expect_mask(mg::bias_dropout_add(x, zero, mg::zeros({40, width}), p).to_vector<float>(), 7);
  }
}

TEST_CASE("random: threads drawing from one generator at once never share counters") {
  using namespace mg;
  Generator g(5);
  constexpr int kThreads = 4, kDraws = 20000;
  std::vector<std::vector<uint64_t>> offsets(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kDraws; ++i) offsets[size_t(t)].push_back(g.draw(uint64_t(1 + t)).offset);
    });
  for (auto& th : threads) th.join();
  std::vector<uint64_t> all;
  for (auto& o : offsets) all.insert(all.end(), o.begin(), o.end());
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());  // every draw got its own block
  CHECK(g.offset() == uint64_t(kThreads) * kDraws * 4);            // 1..4 counters: one Philox block each
}

TEST_CASE("random: ops take their own generator and leave the default one alone") {
  using namespace mg;
  mg::GeneratorStateGuard restore;
  manual_seed(77);
  std::vector<float> from_default = randn({5, 7}).to_vector<float>();
  uint64_t default_offset = default_generator().offset();
  Generator mine(77);
  CHECK(randn({5, 7}, {}, &mine).to_vector<float>() == from_default);  // same seed, same numbers
  CHECK(default_generator().offset() == default_offset);
  CHECK(mine.offset() == default_offset);
  Generator a(3), b(3);
  CHECK(rand({9}, {}, &a).to_vector<float>() == rand({9}, {}, &b).to_vector<float>());
  CHECK(randint(0, 50, {9}, kInt64, &a).to_vector<int64_t>() == randint(0, 50, {9}, kInt64, &b).to_vector<int64_t>());
  Tensor x = ones({64});
  CHECK(dropout(x, 0.5, true, &a).to_vector<float>() == dropout(x, 0.5, true, &b).to_vector<float>());
  Tensor w1 = empty({6, 6}), w2 = empty({6, 6});
  nn::init::kaiming_uniform_(w1, 0.0, nn::init::FanMode::FanIn, nn::init::Nonlinearity::ReLU, &a);
  nn::init::kaiming_uniform_(w2, 0.0, nn::init::FanMode::FanIn, nn::init::Nonlinearity::ReLU, &b);
  CHECK(w1.to_vector<float>() == w2.to_vector<float>());
  CHECK(default_generator().offset() == default_offset);
}
