// Op values on small inputs checked by hand (or by a formula written out here), across dtypes:
// integer and bool results, NaN propagation, argmax ties, and half precision.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <memgrad/memgrad.h>

namespace {

using V = std::vector<double>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

mg::Tensor T(const std::vector<float>& v, const mg::Shape& s = {}) {
  return mg::tensor(v, s.empty() ? mg::Shape{int64_t(v.size())} : s);
}
mg::Tensor I(const std::vector<int64_t>& v, const mg::Shape& s = {}) {
  return mg::tensor(v, s.empty() ? mg::Shape{int64_t(v.size())} : s);
}

// Values equal to `want` within `tol` (NaN matches NaN).
bool near(const mg::Tensor& t, const V& want, double tol = 1e-6) {
  auto got = t.to_vector<double>();
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) != std::isnan(got[i])) return false;
    if (!std::isnan(want[i]) && std::abs(got[i] - want[i]) > tol * (1 + std::abs(want[i]))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("elementwise binary ops") {
  auto a = T({1, 2, 3, 4}, {2, 2}), b = T({10, 20});
  CHECK(near(a + b, {11, 22, 13, 24}));  // b broadcasts over rows
  CHECK(near(mg::add(a, b, 2), {21, 42, 23, 44}));
  CHECK(near(mg::sub(a, b, 0.5), {-4, -8, -2, -6}));
  CHECK(near(a * b, {10, 40, 30, 80}));
  CHECK(near(a / b, {0.1, 0.1, 0.3, 0.2}));
  CHECK(near(mg::pow(a, T({2, 0.5})), {1, std::sqrt(2.0), 9, 2}));
  CHECK(near(mg::maximum(a, T({2, 2})), {2, 2, 3, 4}));
  CHECK(near(mg::minimum(a, T({2, 2})), {1, 2, 2, 2}));
  CHECK(near(a + 1, {2, 3, 4, 5}));
  CHECK(near(a - 1, {0, 1, 2, 3}));
  CHECK(near(a * 3, {3, 6, 9, 12}));
  CHECK(near(a / 4, {0.25, 0.5, 0.75, 1}));
  CHECK(near(10 - a, {9, 8, 7, 6}));
  CHECK(near(2 / a, {2, 1, 2.0 / 3, 0.5}));
  CHECK(near(a.pow(2), {1, 4, 9, 16}));
  CHECK(near(-a, {-1, -2, -3, -4}));
  // The outer product by broadcasting a column against a row.
  CHECK(near(T({1, 2}, {2, 1}) * T({3, 4, 5}, {1, 3}), {3, 4, 5, 6, 8, 10}));
}

TEST_CASE("elementwise unary ops") {
  auto x = T({-2, -0.5, 0, 1.5});
  CHECK(near(mg::abs(x), {2, 0.5, 0, 1.5}));
  CHECK(near(mg::relu(x), {0, 0, 0, 1.5}));
  CHECK(near(mg::exp(x), {std::exp(-2.0), std::exp(-0.5), 1, std::exp(1.5)}));
  CHECK(near(mg::tanh(x), {std::tanh(-2.0), std::tanh(-0.5), 0, std::tanh(1.5)}));
  CHECK(near(mg::sigmoid(x), {1 / (1 + std::exp(2.0)), 1 / (1 + std::exp(0.5)), 0.5, 1 / (1 + std::exp(-1.5))}));
  CHECK(near(mg::silu(x), {-2 / (1 + std::exp(2.0)), -0.5 / (1 + std::exp(0.5)), 0, 1.5 / (1 + std::exp(-1.5))}));
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  CHECK(near(mg::gelu(x), {gelu(-2), gelu(-0.5), 0, gelu(1.5)}));
  auto gelu_tanh = [](double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); };
  CHECK(near(mg::gelu(x, mg::GeluApprox::Tanh), {gelu_tanh(-2), gelu_tanh(-0.5), 0, gelu_tanh(1.5)}));
  auto p = T({0.25f, 1, 4});
  CHECK(near(mg::log(p), {std::log(0.25), 0, std::log(4.0)}));
  CHECK(near(mg::sqrt(p), {0.5, 1, 2}));
  CHECK(near(mg::rsqrt(p), {2, 1, 0.5}));
  CHECK(near(mg::log(T({0, -1})), {-std::numeric_limits<double>::infinity(), kNaN}));
  CHECK(near(mg::clamp(x, -1.0, 1.0), {-1, -0.5, 0, 1}));
  CHECK(near(mg::clamp(x, std::nullopt, 0.0), {-2, -0.5, 0, 0}));
  CHECK(near(mg::clamp(x, 0.0, std::nullopt), {0, 0, 0, 1.5}));
}

TEST_CASE("where, masked_fill, comparisons") {
  auto c = mg::tensor(std::vector<bool>{true, false, true});
  auto a = T({1, 2, 3}), b = T({-1, -2, -3});
  CHECK(near(mg::where(c, a, b), {1, -2, 3}));
  CHECK(near(mg::where(c, a, mg::scalar_tensor(0.0)), {1, 0, 3}));
  CHECK(near(mg::masked_fill(a, c, 9), {9, 2, 9}));
  auto lt = a < T({2, 2, 2});
  CHECK(lt.dtype() == mg::kBool);
  CHECK(lt.to_vector<bool>() == std::vector<bool>{true, false, false});
  CHECK((a <= 2).to_vector<bool>() == std::vector<bool>{true, true, false});
  CHECK((a > 2).to_vector<bool>() == std::vector<bool>{false, false, true});
  CHECK((a >= 2).to_vector<bool>() == std::vector<bool>{false, true, true});
  CHECK((a == 2).to_vector<bool>() == std::vector<bool>{false, true, false});
  CHECK((a != 2).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK((I({1, 2, 3}) == a).dtype() == mg::kBool);  // int64 vs float32 compares in float32
  CHECK((I({1, 2, 3}) < 1.5).to_vector<bool>() == std::vector<bool>{true, false, false});
  CHECK((T({kNaN}) == T({kNaN})).to_vector<bool>() == std::vector<bool>{false});
  CHECK((T({kNaN}) != T({kNaN})).to_vector<bool>() == std::vector<bool>{true});
}

TEST_CASE("integer and bool dtypes") {
  auto i = mg::tensor(std::vector<int32_t>{7, -7, 2, 9});
  auto s = i.sum();
  CHECK(s.dtype() == mg::kInt64);
  CHECK(s.item<int64_t>() == 11);
  auto bl = mg::tensor(std::vector<bool>{true, true, false, true});
  CHECK(bl.sum().dtype() == mg::kInt64);
  CHECK(bl.sum().item<int64_t>() == 3);
  CHECK((bl + bl).dtype() == mg::kBool);
  // Integer division is true division.
  auto q = i / mg::tensor(std::vector<int32_t>{2, 2, 4, 3});
  CHECK(q.dtype() == mg::kFloat32);
  CHECK(near(q, {3.5, -3.5, 0.5, 3}));
  CHECK(near(i / 2, {3.5, -3.5, 1, 4.5}));
  // Integer arithmetic stays exact, in the integer dtype.
  CHECK((i * 3).to_vector<int32_t>() == std::vector<int32_t>{21, -21, 6, 27});
  CHECK((i + i).to_vector<int32_t>() == std::vector<int32_t>{14, -14, 4, 18});
  CHECK((i - 10).to_vector<int32_t>() == std::vector<int32_t>{-3, -17, -8, -1});
  CHECK(mg::abs(i).to_vector<int32_t>() == std::vector<int32_t>{7, 7, 2, 9});
  CHECK(mg::maximum(i, mg::tensor(std::vector<int32_t>{0, 0, 5, 5})).to_vector<int32_t>() ==
        std::vector<int32_t>{7, 0, 5, 9});
  auto big = mg::tensor(std::vector<int64_t>{int64_t(1) << 53, 1});
  CHECK(big.sum().item<int64_t>() == (int64_t(1) << 53) + 1);  // summed in int64, not double
  // clamp on integers keeps the dtype, with one or both bounds.
  auto c = mg::clamp(i, 0, 8);
  CHECK(c.dtype() == mg::kInt32);
  CHECK(c.to_vector<int32_t>() == std::vector<int32_t>{7, 0, 2, 8});
  CHECK(mg::clamp(i, 0, std::nullopt).to_vector<int32_t>() == std::vector<int32_t>{7, 0, 2, 9});
  CHECK(mg::clamp(i, std::nullopt, 3).to_vector<int32_t>() == std::vector<int32_t>{3, -7, 2, 3});
  CHECK(mg::clamp(I({-5, 5}), -1, std::nullopt).to_vector<int64_t>() == std::vector<int64_t>{-1, 5});
  auto ii = i.clone();
  ii.clamp_(-1, 1);
  CHECK(ii.to_vector<int32_t>() == std::vector<int32_t>{1, -1, 1, 1});
  // amax/argmax on integers.
  CHECK(mg::amax(i).item<int64_t>() == 9);
  CHECK(mg::amin(i).dtype() == mg::kInt32);
  CHECK(mg::argmin(i, 0).item<int64_t>() == 1);
  // Float-only math on integers computes in float32.
  CHECK(mg::sqrt(I({4, 9})).dtype() == mg::kFloat32);
  CHECK(near(mg::sqrt(I({4, 9})), {2, 3}));
}

TEST_CASE("reductions") {
  auto x = T({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(x.sum().item<float>() == 21);
  CHECK(near(x.sum({0}), {5, 7, 9}));
  CHECK(near(x.sum({1}), {6, 15}));
  CHECK(x.sum({1}, true).shape() == mg::Shape{2, 1});
  CHECK(near(x.sum({-1, 0}), {21}));
  CHECK(x.sum({0, 1}).dim() == 0);
  CHECK(near(x.mean(), {3.5}));
  CHECK(near(x.mean({0}), {2.5, 3.5, 4.5}));
  CHECK(near(x.var(), {3.5}));  // sample variance of 1..6
  CHECK(near(x.var({1}, 0), {2.0 / 3, 2.0 / 3}));
  CHECK(near(mg::amax(x, {0}), {4, 5, 6}));
  CHECK(near(mg::amin(x, {1}), {1, 4}));
  CHECK(near(x.max(), {6}));
  CHECK(near(x.min(), {1}));
  auto [v, idx] = mg::max(T({3, 1, 3, 2, 5, 5}, {2, 3}), 1);
  CHECK(near(v, {3, 5}));
  CHECK(idx.dtype() == mg::kInt64);
  CHECK(idx.to_vector<int64_t>() == std::vector<int64_t>{0, 1});  // ties: the first index
  auto [mn_values, mn_indices] = mg::min(T({3, 1, 3, 2, 5, 5}, {2, 3}), 0, true);
  CHECK(mn_values.shape() == mg::Shape{1, 3});
  CHECK(mn_indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0});
  CHECK(mg::argmax(T({1, 7, 7, 7}), 0).item<int64_t>() == 1);
  CHECK(mg::argmin(T({4, 0, 0, 9}), 0).item<int64_t>() == 1);
  CHECK(mg::argmax(T({1, 9, 9, 0, 3, 0}, {3, 2}), 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  // Reducing two dims that are not adjacent.
  auto y = mg::arange(24, mg::kFloat32).view({2, 3, 4});
  CHECK(near(y.sum({0, 2}), {60, 92, 124}));
  CHECK(near(mg::sum_to(mg::ones({2, 3, 4}), {3, 1}), {8, 8, 8}));
}

TEST_CASE("NaN propagates through max, amax, maximum and argmax") {
  auto x = T({1, kNaN, 3, 2});
  CHECK(std::isnan(x.max().item<double>()));
  CHECK(std::isnan(mg::amax(x).item<double>()));
  CHECK(std::isnan(mg::amin(x).item<double>()));
  CHECK(std::isnan(mg::amax(T({kNaN, 5})).item<double>()));  // NaN first
  CHECK(std::isnan(mg::amax(T({5, kNaN})).item<double>()));  // NaN last
  CHECK(near(mg::amax(T({1, kNaN, 3, 4}, {2, 2}), {1}), {kNaN, 4}));
  CHECK(mg::argmax(x, 0).item<int64_t>() == 1);  // the NaN's index
  CHECK(mg::argmax(T({kNaN, 9, kNaN}), 0).item<int64_t>() == 0);
  CHECK(mg::argmin(T({3, 0, kNaN}), 0).item<int64_t>() == 2);
  CHECK(near(mg::maximum(T({1, kNaN}), T({kNaN, 1})), {kNaN, kNaN}));
  CHECK(near(mg::minimum(T({1, kNaN}), T({kNaN, 1})), {kNaN, kNaN}));
  CHECK(std::isnan(std::get<0>(mg::max(x, 0)).item<double>()));
}

TEST_CASE("softmax family") {
  auto x = T({0, std::log(3.0f), 1000, 1000}, {2, 2});
  CHECK(near(mg::softmax(x, 1), {0.25, 0.75, 0.5, 0.5}));  // large logits do not overflow
  CHECK(near(mg::log_softmax(x, 1), {std::log(0.25), std::log(0.75), std::log(0.5), std::log(0.5)}, 1e-5));
  auto cols = mg::softmax(T({0, 0, 0, std::log(3.0f)}, {2, 2}), 0);
  CHECK(near(cols, {0.5, 0.25, 0.5, 0.75}));
}

TEST_CASE("matmul and linear") {
  auto a = T({1, 2, 3, 4}, {2, 2}), b = T({5, 6, 7, 8}, {2, 2});
  CHECK(near(mg::matmul(a, b), {19, 22, 43, 50}));
  CHECK(near(mg::matmul(a.t(), b), {26, 30, 38, 44}));
  CHECK(near(mg::matmul(T({1, 2}), T({3, 4})), {11}));  // 1-d @ 1-d is a dot product
  CHECK(mg::matmul(T({1, 2}), T({3, 4})).dim() == 0);
  CHECK(near(mg::matmul(T({1, 1}), b), {12, 14}));
  CHECK(near(mg::matmul(a, T({1, -1})), {-1, -1}));
  auto batch = mg::stack({a, b});  // [2, 2, 2]
  CHECK(near(mg::matmul(batch, mg::eye(2)), {1, 2, 3, 4, 5, 6, 7, 8}));
  CHECK(near(mg::matmul(batch, a), {7, 10, 15, 22, 23, 34, 31, 46}));
  CHECK(mg::matmul(mg::ones({3, 1, 2, 4}), mg::ones({5, 4, 6})).shape() == mg::Shape{3, 5, 2, 6});
  CHECK(near(mg::matmul(mg::ones({2, 0}), mg::ones({0, 2})), {0, 0, 0, 0}));
  auto w = T({1, 0, 0, 1, 1, 1}, {3, 2}), bias = T({0.5, 0, -1});
  CHECK(near(mg::linear(a, w, bias), {1.5, 2, 2, 3.5, 4, 6}));
  CHECK(near(mg::linear(a, w), {1, 2, 3, 3, 4, 7}));
  CHECK(near(mg::matmul(mg::tensor(std::vector<int32_t>{1, 2, 3, 4}, {2, 2}),
                        mg::tensor(std::vector<int32_t>{5, 6, 7, 8}, {2, 2})),
             {19, 22, 43, 50}));
}

// The fast CPU paths (threaded GEMM blocks, vectorised exp and tanh, column-block sums) against
// the same formulas written out in double, on sizes that take those paths.
TEST_CASE("large inputs: GEMM blocks, softmax, cross-entropy, gelu and sums against double") {
  mg::manual_seed(3);
  const int64_t M = 300, K = 70, N = 130;
  auto a = mg::randn({M, K}), b = mg::randn({N, K});
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  auto prod = mg::matmul(a, b.t()).to_vector<double>();    // split by rows
  auto prod_t = mg::matmul(b, a.t()).to_vector<double>();  // N < M: split by columns
  double worst = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k) want += av[size_t(i * K + k)] * bv[size_t(j * K + k)];
      worst = std::max({worst, std::abs(prod[size_t(i * N + j)] - want), std::abs(prod_t[size_t(j * M + i)] - want)});
    }
  CHECK(worst < 1e-4);

  auto x = mg::randn({64, 2048}) * 8.0;  // logits up to about +-40
  x = mg::masked_fill(x, mg::gt(mg::randn({64, 2048}), 2.0), -INFINITY);
  auto xv = x.to_vector<double>();
  auto sm = mg::softmax(x, 1).to_vector<double>(), lsm = mg::log_softmax(x, 1).to_vector<double>();
  double worst_sm = 0, worst_lsm = 0;
  bool masked_zero = true;
  for (int64_t r = 0; r < 64; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < 2048; ++c) mx = std::max(mx, xv[size_t(r * 2048 + c)]);
    for (int64_t c = 0; c < 2048; ++c) sum += std::exp(xv[size_t(r * 2048 + c)] - mx);
    for (int64_t c = 0; c < 2048; ++c) {
      size_t i = size_t(r * 2048 + c);
      if (std::isinf(xv[i])) {
        masked_zero = masked_zero && sm[i] == 0.0;
        continue;
      }
      double p = std::exp(xv[i] - mx) / sum;
      worst_sm = std::max(worst_sm, std::abs(sm[i] - p) / p);
      worst_lsm = std::max(worst_lsm, std::abs(lsm[i] - std::log(p)) / (1 + std::abs(std::log(p))));
    }
  }
  auto z = mg::masked_fill(x, mg::eq(x, -INFINITY), -50.0);  // cross-entropy on finite logits
  auto zv = z.to_vector<double>();
  auto target = mg::randint(0, 2048, {64});
  auto tv = target.to_vector<int64_t>();
  double ce = mg::cross_entropy(z, target).item<double>(), want_ce = 0;
  for (int64_t r = 0; r < 64; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < 2048; ++c) mx = std::max(mx, zv[size_t(r * 2048 + c)]);
    for (int64_t c = 0; c < 2048; ++c) sum += std::exp(zv[size_t(r * 2048 + c)] - mx);
    want_ce += (mx + std::log(sum) - zv[size_t(r * 2048 + tv[size_t(r)])]) / 64;
  }
  CHECK(masked_zero);  // exp(-inf) is exactly 0
  CHECK(worst_sm < 1e-5);
  CHECK(worst_lsm < 1e-5);
  CHECK(std::abs(ce - want_ce) < 1e-5 * std::abs(want_ce));

  auto g = mg::linspace(-12, 12, 4801);
  auto gv = g.to_vector<double>(), got = mg::gelu(g, mg::GeluApprox::Tanh).to_vector<double>();
  double worst_gelu = 0;
  for (size_t i = 0; i < gv.size(); ++i) {
    double v = gv[i], want = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    worst_gelu = std::max(worst_gelu, std::abs(got[i] - want) / (2e-6 + 1e-5 * std::abs(want)));
  }
  CHECK(worst_gelu < 1);  // within 2e-6 absolute + 1e-5 relative

  auto cols = mg::randn({37, 600});  // a sum over rows with more than one block of columns
  auto cv = cols.to_vector<double>(), s0 = mg::sum(cols, {0}).to_vector<double>();
  double worst_sum = 0;
  for (int64_t j = 0; j < 600; ++j) {
    double want = 0;
    for (int64_t i = 0; i < 37; ++i) want += cv[size_t(i * 600 + j)];
    worst_sum = std::max(worst_sum, std::abs(s0[size_t(j)] - want));
  }
  CHECK(worst_sum < 1e-5);
}

TEST_CASE("joining, splitting, indexing") {
  auto a = T({1, 2, 3, 4}, {2, 2}), b = T({5, 6}, {1, 2});
  CHECK(near(mg::cat({a, b}), {1, 2, 3, 4, 5, 6}));
  CHECK(near(mg::cat({a, b.t()}, 1), {1, 2, 5, 3, 4, 6}));
  CHECK(mg::cat({a, I({7, 8}, {1, 2})}).dtype() == mg::kFloat32);
  auto st = mg::stack({T({1, 2}), T({3, 4})}, 1);
  CHECK(st.shape() == mg::Shape{2, 2});
  CHECK(near(st, {1, 3, 2, 4}));
  auto parts = mg::split(mg::arange(5, mg::kFloat32), 2);
  REQUIRE(parts.size() == 3);
  CHECK(near(parts[2], {4}));
  auto ch = mg::chunk(mg::arange(6, mg::kFloat32), 3);
  REQUIRE(ch.size() == 3);
  CHECK(near(ch[1], {2, 3}));
  auto sw = mg::split_with_sizes(mg::arange(6, mg::kFloat32), {1, 5});
  CHECK(near(sw[1], {1, 2, 3, 4, 5}));
  auto x = T({10, 11, 12, 20, 21, 22}, {2, 3});
  CHECK(near(mg::index_select(x, 1, I({2, 0, 2})), {12, 10, 12, 22, 20, 22}));
  CHECK(near(mg::index_select(x, 0, I({1})), {20, 21, 22}));
  CHECK(near(mg::gather(x, 1, I({2, 2, 0, 1}, {2, 2})), {12, 12, 20, 21}));
  CHECK(near(mg::gather(x, 0, I({1, 0, 1}, {1, 3})), {20, 11, 22}));
  auto emb = mg::embedding(x, I({1, 1, 0, 1}, {2, 2}));
  CHECK(emb.shape() == mg::Shape{2, 2, 3});
  CHECK(near(emb.select(0, 1).select(0, 0), {10, 11, 12}));
  auto sq = mg::ones({3, 3});
  CHECK(near(mg::tril(sq), {1, 0, 0, 1, 1, 0, 1, 1, 1}));
  CHECK(near(mg::triu(sq, 1), {0, 1, 1, 0, 0, 1, 0, 0, 0}));
  CHECK(near(mg::tril(sq, -1), {0, 0, 0, 1, 0, 0, 1, 1, 0}));
}

TEST_CASE("neural-network ops") {
  // layer_norm of [1, 2, 3]: mean 2, biased variance 2/3.
  auto x = T({1, 2, 3, 5, 5, 5}, {2, 3});
  double r = 1 / std::sqrt(2.0 / 3 + 1e-5);
  CHECK(near(mg::layer_norm(x, {3}), {-r, 0, r, 0, 0, 0}, 1e-5));
  CHECK(near(mg::layer_norm(x, {3}, T({1, 2, 3}), T({0, 0, 1})), {-r, 0, 3 * r + 1, 0, 0, 1}, 1e-5));
  CHECK(near(mg::layer_norm(T({1, 3}, {1, 2, 1}), {2, 1}, {}, {}, 0), {-1, 1}, 1e-6));
  // cross_entropy: equal logits over C classes give log C; a confident right answer about 0.
  auto logits = T({0, 0, 0, 0, 100, 0}, {2, 3});
  auto per = mg::cross_entropy(logits, I({2, 1}), -100, 0.0, mg::Reduction::None);
  CHECK(near(per, {std::log(3.0), 0}, 1e-5));
  CHECK(near(mg::cross_entropy(logits, I({2, 1})), {std::log(3.0) / 2}, 1e-5));
  CHECK(near(mg::cross_entropy(logits, I({2, 1}), -100, 0.0, mg::Reduction::Sum), {std::log(3.0)}, 1e-5));
  CHECK(near(mg::cross_entropy(logits, I({2, -100})), {std::log(3.0)}, 1e-5));  // mean over kept rows
  // Label smoothing 0.3 on the confident row: 0.7 * 0 + 0.3 * mean(-log p) = 0.3 * (2 * 100) / 3.
  CHECK(near(mg::cross_entropy(logits.narrow(0, 1, 1), I({1}), -100, 0.3), {20}, 1e-4));
  // [N, C, d] logits: the class dim is 1.
  auto l3 = mg::zeros({1, 4, 2});
  CHECK(near(mg::cross_entropy(l3, I({0, 3}, {1, 2}), -100, 0, mg::Reduction::None), {std::log(4.0), std::log(4.0)},
             1e-5));
  CHECK(near(mg::mse_loss(T({1, 2, 3}), T({1, 0, 0})), {13.0 / 3}));
  CHECK(near(mg::mse_loss(T({1, 2, 3}), T({1, 0, 0}), mg::Reduction::Sum), {13}));
  // dropout in eval mode (or p = 0) returns its input.
  auto d = T({1, 2});
  CHECK(mg::dropout(d, 0.5, false).is_same(d));
  CHECK(near(mg::dropout(d, 1.0), {0, 0}));
}

TEST_CASE("conv2d and pooling") {
  auto img = mg::arange(16, mg::kFloat32).view({1, 1, 4, 4});  // rows 0..3, 4..7, 8..11, 12..15
  auto k = T({1, 0, 0, -1}, {1, 1, 2, 2});                     // x[i][j] - x[i+1][j+1] = -5
  auto y = mg::conv2d(img, k);
  CHECK(y.shape() == mg::Shape{1, 1, 3, 3});
  CHECK(near(y, V(9, -5)));
  auto ones = mg::ones({2, 1, 3, 3});
  auto ys = mg::conv2d(img, ones, T({0, 100}), {2, 2}, {1, 1});  // padded sums with stride 2
  CHECK(ys.shape() == mg::Shape{1, 2, 2, 2});
  CHECK(near(ys.select(1, 0),
             {0 + 1 + 4 + 5, 1 + 2 + 3 + 5 + 6 + 7, 4 + 5 + 8 + 9 + 12 + 13, 5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15}));
  CHECK(near(ys.select(1, 1), {110, 124, 151, 190}));
  // Grouped convolution: two channels, one filter each.
  auto two = mg::cat({img, img * 2}, 1);
  auto g = mg::conv2d(two, mg::ones({2, 1, 1, 1}), {}, {1, 1}, {0, 0}, {1, 1}, 2);
  CHECK(near(g.select(1, 1).flatten(), (img * 2).flatten().to_vector<double>()));
  // Dilation 2 with a 2x2 kernel of ones: x[i][j] + x[i][j+2] + x[i+2][j] + x[i+2][j+2].
  auto dl = mg::conv2d(img, mg::ones({1, 1, 2, 2}), {}, {1, 1}, {0, 0}, {2, 2});
  CHECK(near(dl, {20, 24, 36, 40}));
  CHECK(near(mg::max_pool2d(img, {2, 2}), {5, 7, 13, 15}));
  CHECK(near(mg::avg_pool2d(img, {2, 2}), {2.5, 4.5, 10.5, 12.5}));
  CHECK(near(mg::max_pool2d(img, {3, 3}, {1, 1}), {10, 11, 14, 15}));
}

TEST_CASE("half precision ops compute in float and store half") {
  auto xf = T({0.1f, 0.2f, 0.3f, 1000.f});
  auto h = xf.to(mg::kFloat16);
  auto hb = xf.to(mg::kBFloat16);
  auto widened = h.to_vector<float>();
  auto sq = h * h;
  CHECK(sq.dtype() == mg::kFloat16);
  CHECK(sq.element_size() == 2);
  auto bits = sq.data_ptr<mg::Half>();
  for (size_t i = 0; i < 4; ++i) CHECK(bits[i].bits == mg::float_to_half(widened[i] * widened[i]));
  // 1000 * 1000 overflows half's range (65504): infinity, as in PyTorch.
  CHECK(std::isinf(sq.to_vector<float>()[3]));
  // exp in half: the float result rounded once.
  auto e = mg::exp(h);
  for (size_t i = 0; i < 3; ++i) CHECK(e.data_ptr<mg::Half>()[i].bits == mg::float_to_half(std::exp(widened[i])));
  auto bw = hb.to_vector<float>();
  auto bsum = hb + hb;
  CHECK(bsum.dtype() == mg::kBFloat16);
  for (size_t i = 0; i < 4; ++i) CHECK(bsum.data_ptr<mg::BFloat16>()[i].bits == mg::float_to_bfloat16(bw[i] + bw[i]));
  // Reductions accumulate wider than half: 4096 ones sum to 4096 (a half accumulator stalls at 2048).
  auto ones = mg::ones({4096}, mg::kFloat16);
  CHECK(ones.sum().dtype() == mg::kFloat16);
  CHECK(ones.sum().item<float>() == 4096);
  CHECK(mg::ones({4096}, mg::kBFloat16).sum().item<float>() == 4096);  // bfloat16 stalls at 256
  // matmul in half: products and sums in float, one rounding at the end.
  auto m = mg::full({1, 4096}, 1.0, mg::kFloat16);
  CHECK(mg::matmul(m, m.t()).item<float>() == 4096);
  // Mixed half and float32 promotes to float32.
  CHECK((h + xf).dtype() == mg::kFloat32);
  CHECK(near(mg::softmax(mg::zeros({4}, mg::kFloat16), 0), {0.25, 0.25, 0.25, 0.25}));
  CHECK(mg::layer_norm(mg::ones({2, 8}, mg::kBFloat16), {8}).dtype() == mg::kBFloat16);
}
