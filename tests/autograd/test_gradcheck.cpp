// Every differentiable op against central finite differences in float64 (mg::gradcheck), on random
// inputs that include broadcasting and non-contiguous views. Inputs stay away from kinks (relu, abs,
// clamp bounds) and ties (max, pooling), where finite differences are not a reference.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include <memgrad/memgrad.h>

namespace {

using mg::Tensor;
using TL = std::vector<Tensor>;
using Fn = std::function<Tensor(const TL&)>;

// Inputs come from a generator of our own, so they do not depend on (or disturb) mg's RNG.
std::mt19937_64& rng() {
  static std::mt19937_64 g(20261122);
  return g;
}

// Uniform in [lo, hi), float64, not requiring grad.
Tensor uniform(const mg::Shape& shape, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(size_t(mg::numel_of(shape)));
  for (auto& x : v) x = d(rng());
  return mg::tensor(v, shape);
}

// Uniform in [-hi, hi) but at least `gap` away from every point in `kinks`.
Tensor avoiding(const mg::Shape& shape, const std::vector<double>& kinks, double gap = 0.05, double hi = 1.5) {
  std::uniform_real_distribution<double> d(-hi, hi);
  std::vector<double> v(size_t(mg::numel_of(shape)));
  for (auto& x : v) {
    bool near = true;
    while (near) {
      x = d(rng());
      near = false;
      for (double k : kinks) near = near || std::abs(x - k) < gap;
    }
  }
  return mg::tensor(v, shape);
}

Tensor leaf(Tensor t) { return t.requires_grad_(true); }
Tensor param(const mg::Shape& shape, double lo = -1, double hi = 1) { return leaf(uniform(shape, lo, hi)); }

// Random int64 indices in [0, n).
Tensor indices(const mg::Shape& shape, int64_t n) {
  std::uniform_int_distribution<int64_t> d(0, n - 1);
  std::vector<int64_t> v(size_t(mg::numel_of(shape)));
  for (auto& x : v) x = d(rng());
  return mg::tensor(v, shape);
}

Tensor bool_mask(const mg::Shape& shape) {
  std::bernoulli_distribution d(0.5);
  std::vector<bool> v(size_t(mg::numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = d(rng());
  return mg::tensor(v, shape);
}

void check(const char* what, const Fn& fn, const TL& inputs, mg::GradcheckOptions o = {}) {
  INFO(std::string(what));
  mg::GradcheckResult r = mg::gradcheck(fn, inputs, o);
  std::string failure = std::string(what) + ": " + r.message;
  CHECK_MESSAGE(r.ok, failure);
}

}  // namespace

TEST_CASE("gradcheck: add, sub with alpha, mul, div with broadcasting") {
  auto a = param({2, 3, 4}), b = param({3, 1}), c = param({4});
  check("add", [](const TL& x) { return mg::add(x[0], x[1]); }, {a, b});
  check("add alpha", [](const TL& x) { return mg::add(x[0], x[1], 2.5); }, {a, c});
  check("sub alpha", [](const TL& x) { return mg::sub(x[0], x[1], -0.75); }, {a, b});
  check("sub scalar, rsub", [](const TL& x) { return mg::sub(x[0], 2.0) + (3.0 - x[0]); }, {a});
  check("mul", [](const TL& x) { return x[0] * x[1]; }, {a, b});
  check("mul scalar", [](const TL& x) { return x[0] * 1.5 + 2.0 * x[0]; }, {a});
  auto pos = param({3, 1}, 0.5, 2.0);
  check("div", [](const TL& x) { return x[0] / x[1]; }, {a, pos});
  check("div scalar, scalar/tensor", [](const TL& x) { return x[0] / 4.0 + 2.0 / x[1]; }, {pos, pos});
  check("neg", [](const TL& x) { return -x[0]; }, {a});
  // A zero-dim operand broadcasts against everything.
  auto s = param({});
  check("mul zero-dim", [](const TL& x) { return x[0] * x[1]; }, {a, s});
}

TEST_CASE("gradcheck: binary ops on non-contiguous and expanded inputs") {
  auto transposed = leaf(uniform({4, 3}).t());                               // a non-contiguous leaf [3, 4]
  auto stepped = leaf(uniform({6, 5}).slice(0, 0, 6, 2).slice(1, 1, 5, 1));  // [3, 4], strides (10, 1)
  CHECK(!transposed.is_contiguous());
  CHECK(!stepped.is_contiguous());
  auto row = param({4});
  check("mul transposed * stepped", [](const TL& x) { return x[0] * x[1]; }, {transposed, stepped});
  check("div by expanded", [](const TL& x) { return x[0] / x[1].unsqueeze(0).expand({3, 4}).exp(); }, {stepped, row});
  check("expand both",
        [](const TL& x) {
          return x[0].expand({2, 3, 4}) - x[1].expand({2, 3, 4});
        },
        {leaf(uniform({1, 3, 1})), row});
}

TEST_CASE("gradcheck: pow with scalar and tensor exponents") {
  auto x = param({3, 4}, 0.3, 2.0), any = avoiding({3, 4}, {0.0}, 0.1);
  auto e = param({3, 4}, -1.5, 1.5), erow = param({4}, -1, 2);
  check("pow 3", [](const TL& v) { return mg::pow(v[0], 3.0); }, {leaf(any)});
  check("pow 2 (negative base)", [](const TL& v) { return v[0].pow(2); }, {leaf(any.detach().clone())});
  check("pow 0.5", [](const TL& v) { return mg::pow(v[0], 0.5); }, {x});
  check("pow -1.5", [](const TL& v) { return mg::pow(v[0], -1.5); }, {x});
  check("pow tensor", [](const TL& v) { return mg::pow(v[0], v[1]); }, {x, e});
  check("pow tensor broadcast", [](const TL& v) { return mg::pow(v[0], v[1]); }, {x, erow});
}

TEST_CASE("gradcheck: unary maps") {
  auto x = param({3, 5}, -2, 2), pos = param({3, 5}, 0.2, 3);
  check("exp", [](const TL& v) { return mg::exp(v[0]); }, {x});
  check("log", [](const TL& v) { return mg::log(v[0]); }, {pos});
  check("sqrt", [](const TL& v) { return mg::sqrt(v[0]); }, {pos});
  check("rsqrt", [](const TL& v) { return mg::rsqrt(v[0]); }, {pos});
  check("tanh", [](const TL& v) { return mg::tanh(v[0]); }, {x});
  check("sigmoid", [](const TL& v) { return mg::sigmoid(v[0]); }, {x});
  check("gelu erf", [](const TL& v) { return mg::gelu(v[0]); }, {x});
  check("gelu tanh", [](const TL& v) { return mg::gelu(v[0], mg::GeluApprox::Tanh); }, {x});
  check("silu", [](const TL& v) { return mg::silu(v[0]); }, {x});
  auto off_zero = leaf(avoiding({3, 5}, {0.0}));
  check("abs", [](const TL& v) { return mg::abs(v[0]); }, {off_zero});
  check("relu", [](const TL& v) { return mg::relu(v[0]); }, {off_zero});
  check("unary on a transposed leaf", [](const TL& v) { return mg::tanh(v[0]) * mg::exp(v[0]); },
        {leaf(uniform({5, 3}).t())});
}

TEST_CASE("gradcheck: clamp with one or both bounds") {
  auto x = leaf(avoiding({4, 5}, {-0.5, 0.5}));
  check("clamp min", [](const TL& v) { return mg::clamp(v[0], mg::Scalar(-0.5), std::nullopt); }, {x});
  check("clamp max", [](const TL& v) { return mg::clamp(v[0], std::nullopt, mg::Scalar(0.5)); }, {x});
  check("clamp both", [](const TL& v) { return mg::clamp(v[0], mg::Scalar(-0.5), mg::Scalar(0.5)); }, {x});
}

TEST_CASE("gradcheck: where and masked_fill") {
  auto cond = bool_mask({3, 4}), mask_row = bool_mask({4});
  auto a = param({3, 4}), b = param({4}), c = param({3, 1});
  check("where", [cond](const TL& v) { return mg::where(cond, v[0], v[1]); }, {a, b});
  check("where broadcast cond", [mask_row](const TL& v) { return mg::where(mask_row, v[0], v[1]); }, {c, b});
  check("masked_fill", [cond](const TL& v) { return mg::masked_fill(v[0], cond, -3.0); }, {a});
  check("masked_fill broadcast mask", [mask_row](const TL& v) { return mg::masked_fill(v[0], mask_row, 2.0); }, {a});
}

TEST_CASE("gradcheck: reductions over dims, with and without keepdim") {
  auto x = param({3, 4, 5});
  for (bool keep : {false, true}) {
    INFO("keepdim " << keep);
    for (auto dims : std::vector<std::vector<int64_t>>{{}, {0}, {1, 2}, {-1}, {0, 2}}) {
      INFO("dims size " << dims.size());
      if (dims.empty() && keep) continue;
      check("sum", [=](const TL& v) { return mg::sum(v[0], dims, keep); }, {x});
      check("mean", [=](const TL& v) { return mg::mean(v[0], dims, keep); }, {x});
      check("var", [=](const TL& v) { return mg::var(v[0], dims, 1, keep); }, {x});
      check("var correction 0", [=](const TL& v) { return mg::var(v[0], dims, 0, keep); }, {x});
      check("amax", [=](const TL& v) { return mg::amax(v[0], dims, keep); }, {x});
      check("amin", [=](const TL& v) { return mg::amin(v[0], dims, keep); }, {x});
    }
    for (int64_t d : {0, 1, -1}) {
      check("max(dim)", [=](const TL& v) { return std::get<0>(mg::max(v[0], d, keep)); }, {x});
      check("min(dim)", [=](const TL& v) { return std::get<0>(mg::min(v[0], d, keep)); }, {x});
    }
  }
  check("max all", [](const TL& v) { return mg::max(v[0]) * 1.0; }, {x});
  check("min all", [](const TL& v) { return mg::min(v[0]) * 1.0; }, {x});
  check("sum of a transposed leaf", [](const TL& v) { return v[0].sum({1}); }, {leaf(uniform({4, 3}).t())});
  check("mean of a stepped leaf", [](const TL& v) { return v[0].mean({0}, true); },
        {leaf(uniform({6, 4}).slice(0, 1, 6, 2))});
}

TEST_CASE("gradcheck: softmax and log_softmax on several dims") {
  auto x = param({2, 3, 4}, -2, 2);
  for (int64_t d : {0, 1, 2, -1}) {
    INFO("dim " << d);
    check("softmax", [d](const TL& v) { return mg::softmax(v[0], d); }, {x});
    check("log_softmax", [d](const TL& v) { return mg::log_softmax(v[0], d); }, {x});
  }
  check("softmax of a transposed leaf", [](const TL& v) { return v[0].softmax(1); }, {leaf(uniform({4, 3}).t())});
}

TEST_CASE("gradcheck: matmul in every rank combination") {
  struct Case {
    const char* name;
    mg::Shape a, b;
  };
  for (auto c : std::vector<Case>{{"1d.1d", {4}, {4}},
                                  {"1d.2d", {4}, {4, 3}},
                                  {"2d.1d", {3, 4}, {4}},
                                  {"2d.2d", {3, 4}, {4, 2}},
                                  {"3d.3d", {2, 3, 4}, {2, 4, 2}},
                                  {"3d.2d", {2, 3, 4}, {4, 2}},
                                  {"2d.3d", {3, 4}, {2, 4, 2}},
                                  {"3d.1d", {2, 3, 4}, {4}},
                                  {"1d.3d", {4}, {2, 4, 3}},
                                  {"broadcast 4d.3d", {2, 1, 3, 4}, {3, 4, 2}}}) {
    check(c.name, [](const TL& v) { return mg::matmul(v[0], v[1]); }, {param(c.a), param(c.b)});
  }
  check("transposed operands", [](const TL& v) { return v[0].matmul(v[1]); },
        {leaf(uniform({4, 3}).t()), leaf(uniform({2, 4}).t())});
}

TEST_CASE("gradcheck: linear with and without bias") {
  auto x = param({2, 3, 4}), w = param({5, 4}), b = param({5});
  check("linear", [](const TL& v) { return mg::linear(v[0], v[1], v[2]); }, {x, w, b});
  check("linear no bias", [](const TL& v) { return mg::linear(v[0], v[1]); }, {x, w});
  check("linear 2d transposed weight", [](const TL& v) { return mg::linear(v[0], v[1], v[2]); },
        {param({3, 4}), leaf(uniform({4, 5}).t()), b});
}

TEST_CASE("gradcheck: cat, stack, split, chunk") {
  auto a = param({2, 3}), b = param({2, 1}), c = param({2, 2});
  check("cat dim 1", [](const TL& v) { return mg::cat({v[0], v[1], v[2]}, 1); }, {a, b, c});
  check("cat dim 0", [](const TL& v) { return mg::cat({v[0], v[1]}, 0); }, {a, leaf(uniform({3, 4}).t())});
  auto d = param({2, 3});
  check("stack dim 0", [](const TL& v) { return mg::stack({v[0], v[1]}, 0); }, {a, d});
  check("stack dim -1", [](const TL& v) { return mg::stack({v[0], v[1] * 2.0}, -1); }, {a, d});
  auto x = param({7, 3});
  // Each part is transformed differently, so a gradient routed to the wrong part shows.
  check("split",
        [](const TL& v) {
          auto p = mg::split(v[0], 3, 0);
          REQUIRE(p.size() == 3);
          return mg::cat({p[0] * 2.0, mg::exp(p[1]), p[2] * -1.0}, 0);
        },
        {x});
  check("split, one part unused", [](const TL& v) { return mg::split(v[0], 3, 0)[1] * 1.0; }, {x});
  check("split_with_sizes",
        [](const TL& v) {
          auto p = mg::split_with_sizes(v[0], {1, 2}, 1);
          return p[0] * p[1];
        },
        {x});
  check("chunk",
        [](const TL& v) {
          auto p = mg::chunk(v[0], 3, 1);
          REQUIRE(p.size() == 3);
          return p[0] * 3.0 + mg::tanh(p[2]);
        },
        {x});
}

TEST_CASE("gradcheck: gather, index_select, embedding with repeated indices") {
  auto x = param({3, 5});
  auto gi = mg::tensor(std::vector<int64_t>{0, 4, 4, 1, 2, 2, 3, 0, 0}, {3, 3});
  check("gather dim 1", [gi](const TL& v) { return mg::gather(v[0], 1, gi); }, {x});
  auto gi0 = mg::tensor(std::vector<int64_t>{2, 0, 2, 1, 1}, {1, 5});
  auto gi_random = indices({4, 5}, 3);
  check("gather dim 0, random", [gi_random](const TL& v) { return mg::gather(v[0], 0, gi_random); }, {x});
  check("gather dim 0", [gi0](const TL& v) { return mg::gather(v[0], 0, gi0); }, {x});
  auto si = mg::tensor(std::vector<int64_t>{4, 0, 4, 2});
  check("index_select dim 1", [si](const TL& v) { return mg::index_select(v[0], 1, si); }, {x});
  auto si0 = mg::tensor(std::vector<int64_t>{1, 1, 0});
  check("index_select dim 0", [si0](const TL& v) { return mg::index_select(v[0], 0, si0); }, {x});
  auto w = param({6, 3});
  auto ids = mg::tensor(std::vector<int64_t>{0, 5, 5, 2, 0, 3}, {2, 3});
  check("embedding", [ids](const TL& v) { return mg::embedding(v[0], ids); }, {w});
}

TEST_CASE("gradcheck: tril and triu") {
  auto x = param({4, 5}), batched = param({2, 3, 3});
  for (int64_t k : {-1, 0, 2}) {
    INFO("diagonal " << k);
    check("tril", [k](const TL& v) { return mg::tril(v[0], k); }, {x});
    check("triu", [k](const TL& v) { return mg::triu(v[0], k); }, {x});
  }
  check("tril batched", [](const TL& v) { return mg::tril(v[0]); }, {batched});
}

TEST_CASE("gradcheck: layer_norm") {
  auto x = param({2, 3, 4}, -2, 2);
  auto w = param({4}), b = param({4});
  check("affine", [](const TL& v) { return mg::layer_norm(v[0], {4}, v[1], v[2]); }, {x, w, b});
  check("no affine", [](const TL& v) { return mg::layer_norm(v[0], {4}); }, {x});
  check("weight only", [](const TL& v) { return mg::layer_norm(v[0], {4}, v[1]); }, {x, w});
  auto w2 = param({3, 4}), b2 = param({3, 4});
  check("2-d normalized_shape",
        [](const TL& v) {
          return mg::layer_norm(v[0], {3, 4}, v[1], v[2], 1e-3);
        },
        {x, w2, b2});
  check("transposed input", [](const TL& v) { return mg::layer_norm(v[0], {3}); }, {leaf(uniform({3, 4}).t())});
}

TEST_CASE("gradcheck: cross_entropy") {
  auto logits = param({4, 5}, -2, 2);
  auto target = mg::tensor(std::vector<int64_t>{1, 0, 4, 1});
  auto with_ignored = mg::tensor(std::vector<int64_t>{1, -100, 4, 3});
  auto ignore2 = mg::tensor(std::vector<int64_t>{2, 0, 2, 3});
  for (auto red : {mg::Reduction::Mean, mg::Reduction::Sum, mg::Reduction::None}) {
    INFO("reduction " << int(red));
    check("plain", [=](const TL& v) { return mg::cross_entropy(v[0], target, -100, 0.0, red); }, {logits});
    check("ignore_index default", [=](const TL& v) { return mg::cross_entropy(v[0], with_ignored, -100, 0.0, red); },
          {logits});
    check("ignore_index 2", [=](const TL& v) { return mg::cross_entropy(v[0], ignore2, 2, 0.0, red); }, {logits});
    check("label_smoothing", [=](const TL& v) { return mg::cross_entropy(v[0], with_ignored, -100, 0.1, red); },
          {logits});
  }
  auto spatial = param({2, 3, 4}, -2, 2);
  auto st = mg::tensor(std::vector<int64_t>{0, 2, 1, -100, 2, 2, 0, 1}, {2, 4});
  for (auto red : {mg::Reduction::Mean, mg::Reduction::Sum, mg::Reduction::None}) {
    INFO("reduction " << int(red));
    check("[N, C, d]", [=](const TL& v) { return mg::cross_entropy(v[0], st, -100, 0.2, red); }, {spatial});
  }
}

TEST_CASE("gradcheck: mse_loss") {
  auto a = param({3, 4}), b = param({3, 4});
  for (auto red : {mg::Reduction::Mean, mg::Reduction::Sum, mg::Reduction::None}) {
    INFO("reduction " << int(red));
    check("mse", [red](const TL& v) { return mg::mse_loss(v[0], v[1], red); }, {a, b});
  }
}

TEST_CASE("gradcheck: conv2d") {
  struct Case {
    const char* name;
    int64_t c_in, c_out, h, w, k, groups;
    std::vector<int64_t> stride, padding, dilation;
    bool bias;
  };
  for (auto c : std::vector<Case>{{"plain", 2, 3, 5, 4, 3, 1, {1, 1}, {0, 0}, {1, 1}, true},
                                  {"stride 2, padding 1", 2, 2, 5, 5, 3, 1, {2, 2}, {1, 1}, {1, 1}, false},
                                  {"asymmetric stride/padding", 1, 2, 5, 6, 2, 1, {1, 2}, {0, 1}, {1, 1}, true},
                                  {"dilation 2", 2, 2, 6, 5, 2, 1, {1, 1}, {1, 0}, {2, 2}, true},
                                  {"groups 2", 4, 2, 4, 4, 3, 2, {1, 1}, {1, 1}, {1, 1}, true},
                                  {"depthwise", 3, 3, 4, 4, 2, 3, {1, 1}, {0, 0}, {1, 1}, false}}) {
    auto x = param({2, c.c_in, c.h, c.w});
    auto w = param({c.c_out, c.c_in / c.groups, c.k, c.k});
    auto b = param({c.c_out});
    check(
        c.name,
        [c](const TL& v) {
          return mg::conv2d(v[0], v[1], c.bias ? v[2] : Tensor(), c.stride, c.padding, c.dilation, c.groups);
        },
        c.bias ? TL{x, w, b} : TL{x, w});
  }
}

TEST_CASE("gradcheck: max_pool2d and avg_pool2d") {
  auto x = param({2, 2, 5, 5});
  check("max_pool2d 2x2", [](const TL& v) { return mg::max_pool2d(v[0], {2, 2}); }, {x});
  check("max_pool2d overlapping", [](const TL& v) { return mg::max_pool2d(v[0], {3, 3}, {1, 2}); }, {x});
  // Padding only with windows that always see a real element; the values may be negative.
  check("max_pool2d padded", [](const TL& v) { return mg::max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, {x});
  check("avg_pool2d 2x2", [](const TL& v) { return mg::avg_pool2d(v[0], {2, 2}); }, {x});
  check("avg_pool2d overlapping", [](const TL& v) { return mg::avg_pool2d(v[0], {3, 2}, {1, 2}); }, {x});
  check("avg_pool2d padded", [](const TL& v) { return mg::avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, {x});
}

TEST_CASE("gradcheck: view ops") {
  auto x = param({2, 3, 4});
  // Multiplying by a fixed random tensor makes every output element's weight distinct.
  check("view", [](const TL& v) { return v[0].view({6, 4}).exp(); }, {x});
  check("view -1", [](const TL& v) { return v[0].view({4, -1}) * 2.0; }, {x});
  check("reshape (view)", [](const TL& v) { return v[0].reshape({3, 8}).tanh(); }, {x});
  check("reshape (copy)", [](const TL& v) { return v[0].transpose(0, 2).reshape({-1}).sigmoid(); }, {x});
  check("transpose", [](const TL& v) { return v[0].transpose(0, 2).exp(); }, {x});
  check("permute", [](const TL& v) { return v[0].permute({2, 0, 1}) * v[0].permute({2, 0, 1}); }, {x});
  check("narrow", [](const TL& v) { return v[0].narrow(2, 1, 2).exp(); }, {x});
  check("slice step", [](const TL& v) { return v[0].slice(2, 0, 4, 3).exp(); }, {x});
  check("slice negative start", [](const TL& v) { return v[0].slice(1, -2, 3).exp(); }, {x});
  check("select", [](const TL& v) { return v[0].select(1, 2).exp(); }, {x});
  check("select negative", [](const TL& v) { return v[0].select(-1, -1).exp(); }, {x});
  check("expand", [](const TL& v) { return v[0].expand({3, 2, 4}).exp(); }, {param({2, 1})});
  check("expand new dims", [](const TL& v) { return v[0].expand({2, -1, 3}).exp(); }, {param({4, 1})});
  check("squeeze", [](const TL& v) { return v[0].squeeze().exp(); }, {param({1, 3, 1, 2})});
  check("squeeze dim", [](const TL& v) { return v[0].squeeze(2).exp(); }, {param({1, 3, 1, 2})});
  check("unsqueeze", [](const TL& v) { return v[0].unsqueeze(1).expand({3, 2, 4}).exp(); }, {param({3, 4})});
  check("flatten", [](const TL& v) { return v[0].flatten(1).exp(); }, {x});
  check("flatten of transposed", [](const TL& v) { return v[0].transpose(0, 1).flatten().exp(); }, {x});
  check("view of a view", [](const TL& v) { return v[0].t().slice(0, 1, 3).unsqueeze(0).squeeze(0).exp(); },
        {param({3, 4})});
}

TEST_CASE("gradcheck: contiguous, clone, dtype round trips") {
  check("contiguous", [](const TL& v) { return v[0].t().contiguous().exp(); }, {param({3, 4})});
  check("contiguous of contiguous", [](const TL& v) { return v[0].contiguous() * 3.0; }, {param({3, 4})});
  check("clone", [](const TL& v) { return v[0].clone() * v[0]; }, {param({3, 4})});
  check("clone of a stepped view", [](const TL& v) { return v[0].slice(1, 0, 4, 2).clone().exp(); }, {param({3, 4})});
  // A round trip through a narrower dtype rounds, so the step is large and the tolerance loose.
  mg::GradcheckOptions f32;
  f32.eps = 1e-3, f32.atol = 1e-3, f32.rtol = 1e-3;
  check(
      "to float32 and back", [](const TL& v) { return v[0].to(mg::kFloat32).to(mg::kFloat64) * 2.0; }, {param({3, 4})},
      f32);
  check(
      "to float32, op, back", [](const TL& v) { return (v[0].to(mg::kFloat32) * 3.0).to(mg::kFloat64); },
      {param({3, 4})}, f32);
  mg::GradcheckOptions f16;
  f16.eps = 5e-2, f16.atol = 3e-2, f16.rtol = 1e-2;
  check(
      "to float16 and back", [](const TL& v) { return v[0].to(mg::kFloat16).to(mg::kFloat64); }, {param({3, 4})}, f16);
  check("to the same dtype", [](const TL& v) { return v[0].to(mg::kFloat64).exp(); }, {param({3, 4})});
}

TEST_CASE("gradcheck: dropout with a fixed seed") {
  auto x = param({4, 6});
  Fn fn = [](const TL& v) {
    mg::GeneratorStateGuard keep;  // every evaluation draws the same mask
    mg::manual_seed(1234);
    return mg::dropout(v[0], 0.4) * v[0];
  };
  check("dropout", fn, {x});
  // The mask must actually drop something, or the check above proves little.
  Tensor y;
  {
    mg::NoGradGuard ng;
    y = fn({x});
  }
  auto vals = y.to_vector<double>();
  int zeros = 0;
  for (double v : vals) zeros += v == 0.0;
  CHECK(zeros > 0);
  CHECK(zeros < int(vals.size()));
  check("dropout eval is identity", [](const TL& v) { return mg::dropout(v[0], 0.4, false); }, {x});
}

TEST_CASE("gradcheck: a composite chain through many ops") {
  auto x = param({2, 3, 4}), w = param({5, 4}), g = param({5});
  check("mlp block",
        [](const TL& v) {
          auto h = mg::gelu(mg::linear(mg::layer_norm(v[0], {4}), v[1]));
          return mg::softmax(h * v[2], -1).sum({1});
        },
        {x, w, g});
}

TEST_CASE("gradcheck: detects a wrong gradient") {
  // A custom function with a deliberately wrong backward must fail, so the passes above mean something.
  auto x = param({3});
  auto r = mg::gradcheck(
      [](const TL& v) {
        return mg::autograd::apply_function(
            "WrongSquare",
            [](mg::autograd::FunctionCtx& ctx, const TL& in) {
              ctx.save_for_backward({in[0]});
              return TL{in[0] * in[0]};
            },
            [](mg::autograd::FunctionCtx& ctx, const TL& g) { return TL{g[0] * 3.0 * ctx.saved()[0]}; }, v)[0];
      },
      {x});
  CHECK(!r.ok);
  CHECK(r.message.find("analytic") != std::string::npos);
}
