// mg::gradcheck itself: on leaves that are non-contiguous views, through a chain of many ops, and
// against a deliberately wrong gradient, which it must catch. Each op's own gradcheck is
// "<op>: gradcheck" in the ops suite (tests/ops), on every differentiable case of its list.
#include <doctest/doctest.h>

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

Tensor leaf(Tensor t) { return t.requires_grad_(true); }
Tensor param(const mg::Shape& shape, double lo = -1, double hi = 1) { return leaf(uniform(shape, lo, hi)); }

void check(const char* what, const Fn& fn, const TL& inputs, mg::GradcheckOptions o = {}) {
  INFO(std::string(what));
  mg::GradcheckResult r = mg::gradcheck(fn, inputs, o);
  std::string failure = std::string(what) + ": " + r.message;
  CHECK_MESSAGE(r.ok, failure);
}

}  // namespace

TEST_CASE("gradcheck: leaves that are non-contiguous views") {
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
