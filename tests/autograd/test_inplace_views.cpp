// In-place ops on views of tensors that require grad, with libtorch's semantics: the view's base
// takes the op into its history (CopySlices), every view of the base then reads the new history,
// and the gradients are those of the same program written out of place (checked against central
// differences). A view of a leaf that requires grad, and an expanded view, raise.
#include <doctest/doctest.h>

#include <random>

#include <memgrad/memgrad.h>

#include "autograd/random_inputs.h"

namespace {

using mg::Tensor;
using TL = std::vector<Tensor>;
using Fn = std::function<Tensor(const TL&)>;

std::mt19937_64& rng() {
  static std::mt19937_64 g(777);
  return g;
}
Tensor param(const mg::Shape& shape, double lo = -1, double hi = 1) {
  return uniform_from(rng(), shape, lo, hi).requires_grad_();
}

void check(const std::string& what, const Fn& fn, const TL& inputs) {
  INFO(what);
  mg::GradcheckResult r = mg::gradcheck(fn, inputs);
  const std::string failure = what + ": " + r.message;
  CHECK_MESSAGE(r.ok, failure);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("in-place on views: gradients flow through the base, as written out of place") {
  auto x = param({3, 4}), w = param({4}), c = param({3});
  check("mul_ on a column slice",
        [](const TL& v) {
          Tensor y = v[0] * 1.0;
          y.slice(1, 1, 3).mul_(v[0].slice(1, 0, 2));
          return y * y;
        },
        {x});
  check("add_ on a row, from another input",
        [](const TL& v) {
          Tensor y = v[0] * v[0] + 1.0;  // (tanh would keep its output, which add_ then changes: an error)
          y.select(0, 1).add_(v[1] * v[1], 0.5);
          return y * v[0];
        },
        {x, w});
  check("a view of a view (strided)",
        [](const TL& v) {
          Tensor y = v[0] * 2.0;
          y.t().slice(0, 0, 4, 2).select(1, 2).sub_(v[1].slice(0, 0, 2));
          return mg::exp(y);
        },
        {x, w});
  check("copy_ into a buffer without history",
        [](const TL& v) {
          Tensor buf = mg::zeros({3, 6}, mg::kFloat64);
          buf.slice(1, 1, 5).copy_(v[0] * v[0]);
          buf.select(1, 0).copy_(v[1]);
          return buf.sum({1}) * buf.select(1, 2);
        },
        {x, c});
  check("fill_ and zero_ cut the region's gradient",
        [](const TL& v) {
          Tensor y = v[0] * v[0];
          y.select(1, 0).fill_(3.0);
          y.slice(0, 2, 3).zero_();
          return y * v[0];
        },
        {x});
  auto mask = mg::tensor(std::vector<bool>{true, false, false, true}, {4});
  check("masked_fill_, relu_, div_, clamp_ on rows",
        [mask](const TL& v) {
          Tensor y = v[0] * 3.0;
          y.select(0, 0).masked_fill_(mask, -1.0);
          y.select(0, 2).div_(v[1] * v[1] + 1.0).clamp_(-0.5, 2.0);
          y.select(0, 1).relu_();  // last: it keeps its output, and views share one version counter
          return y * y;
        },
        {x, w});
  check("scatter_ and index_add_ on a view",
        [](const TL& v) {
          Tensor y = v[0] * 1.0;
          y.slice(0, 0, 2).scatter_(1, mg::tensor(std::vector<int64_t>{3, 0, 1, 2}, {2, 2}),
                                    v[0].slice(0, 1, 3).slice(1, 0, 2));
          y.t().index_add_(1, mg::tensor(std::vector<int64_t>{2, 0}), v[0].t().slice(1, 0, 2) * 0.5);
          return y * v[0];
        },
        {x});
}

TEST_CASE("in-place on views: other views of the base read its new history") {
  auto x = param({3, 4}), w = param({4});
  check("a view made before the in-place op on another view",
        [](const TL& v) {
          Tensor y = v[0] * 1.0;
          Tensor before = y.t();      // made before
          y.select(0, 1).mul_(v[1]);  // rebases y
          return before * before;     // sees the new values, and their gradient
        },
        {x, w});
  check("a view made before an in-place op on the base itself",
        [](const TL& v) {
          Tensor y = v[0] * 1.0;
          Tensor row = y.select(0, 2);
          y.mul_(v[1]);
          return row * v[1];
        },
        {x, w});
  // The values follow too: the view and the base share the memory.
  Tensor y = x.detach() * 1.0;
  y.requires_grad_();
  Tensor h = y * 1.0, col = h.select(1, 0);
  h.select(0, 0).fill_(5.0);
  CHECK(col.to_vector<double>()[0] == 5.0);
  CHECK(col.requires_grad());
  CHECK(h.grad_fn()->name() == "CopySlices");
}

TEST_CASE("in-place on views: a gradient of a gradient passes through CopySlices") {
  auto x = param({3, 4}), w = param({4});
  check("double backward",
        [](const TL& v) {
          mg::EnableGradGuard grad_mode;
          Tensor y = mg::sigmoid(v[0]) * v[0];
          y.select(0, 1).mul_(v[1] * v[1]);
          Tensor loss = (y * y * v[0]).sum();
          TL g = mg::autograd::grad({loss}, {v[0], v[1]}, {}, std::nullopt, true);
          return (g[0] * g[0]).sum() + (g[1] * g[1]).sum();
        },
        {x, w});
}

TEST_CASE("in-place on views: what cannot be differentiated raises, and says what to write") {
  auto leaf = param({2, 3});
  try {
    leaf.select(0, 0).mul_(2.0);
    FAIL("expected an AutogradError");
  } catch (const mg::AutogradError& e) {
    CHECK(contains(e.what(), "mul_"));
    CHECK(contains(e.what(), "view of a leaf tensor that requires grad"));
    CHECK(contains(e.what(), "clone()"));
  }
  {
    mg::NoGradGuard ng;  // as optimizers do
    leaf.select(0, 0).mul_(2.0);
  }
  Tensor h = leaf * 1.0;
  CHECK_THROWS_AS(h.select(0, 0).unsqueeze(0).expand({4, 3}).add_(1.0), mg::AutogradError);
  // The version check still guards what a backward saved: sigmoid keeps its output.
  Tensor s = mg::sigmoid(h);
  s.select(0, 1).add_(1.0);
  CHECK_THROWS_AS(s.sum().backward(), mg::AutogradError);
}

TEST_CASE("in-place on views: no bytes are left behind") {
  const int64_t before = mg::memory_stats(mg::kCPU).allocated;
  {
    auto x = param({16, 8}), w = param({8});
    Tensor y = x * 2.0;
    y.slice(0, 0, 8).mul_(w);
    Tensor other = y.t();
    y.select(1, 3).add_(x.select(1, 2));
    (other * other).sum().backward();
    CHECK(w.grad().defined());
  }
  CHECK(mg::memory_stats(mg::kCPU).allocated == before);
}
