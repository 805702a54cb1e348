// Gradients of gradients (create_graph): .grad that can be differentiated, autograd::grad, the
// second derivative of every op with a backward (gradcheck of v . grad(u . f(x), x) against finite
// differences), a gradient penalty on an MLP and Hessian-vector products of a GPT checked against
// float64 finite differences of the gradient, and the graph freed with its tensors.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include <memgrad/memgrad.h>

#include "autograd/random_inputs.h"

namespace {

using mg::Tensor;
using TL = std::vector<Tensor>;
using Fn = std::function<Tensor(const TL&)>;
using mg::autograd::grad;

std::mt19937_64& rng() {
  static std::mt19937_64 g(20260611);
  return g;
}

Tensor uniform(const mg::Shape& shape, double lo = -1, double hi = 1) { return uniform_from(rng(), shape, lo, hi); }
// Magnitudes in [lo, hi) with random signs: away from the kinks at 0.
Tensor away(const mg::Shape& shape, double lo = 0.3, double hi = 1.5) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::bernoulli_distribution sign(0.5);
  std::vector<double> v(size_t(mg::numel_of(shape)));
  for (auto& x : v) x = sign(rng()) ? d(rng()) : -d(rng());
  return mg::tensor(v, shape);
}
Tensor param(const mg::Shape& shape, double lo = -1, double hi = 1) { return uniform(shape, lo, hi).requires_grad_(); }
Tensor indices(const mg::Shape& shape, int64_t n) {
  std::uniform_int_distribution<int64_t> d(0, n - 1);
  std::vector<int64_t> v(size_t(mg::numel_of(shape)));
  for (auto& x : v) x = d(rng());
  return mg::tensor(v, shape);
}

void check(const std::string& what, const Fn& fn, const TL& inputs, mg::GradcheckOptions o = {}) {
  INFO(what);
  mg::GradcheckResult r = mg::gradcheck(fn, inputs, o);
  const std::string failure = what + ": " + r.message;
  CHECK_MESSAGE(r.ok, failure);
}

// Second derivatives: the gradient of s(x) = sum_i v_i . d(u . f(x))/dx_i, whose inner gradient comes
// from a backward that creates a graph, checked against finite differences of s. u and v are fixed.
void check2(const std::string& what, const Fn& fn, const TL& inputs, mg::GradcheckOptions o = {}) {
  Tensor u;
  {
    mg::NoGradGuard ng;
    u = uniform(fn(inputs).shape());
  }
  TL v;
  for (const Tensor& x : inputs) v.push_back(x.defined() && x.requires_grad() ? uniform(x.shape()) : Tensor());
  auto s = [&](const TL& in) {
    mg::EnableGradGuard grad_mode;  // gradcheck's finite differences run without grad
    Tensor y = fn(in);
    TL wrt, dirs;
    for (size_t i = 0; i < in.size(); ++i)
      if (v[i].defined()) wrt.push_back(in[i]), dirs.push_back(v[i]);
    TL g = grad({(y * u).sum()}, wrt, {}, std::nullopt, /*create_graph=*/true, /*allow_unused=*/true);
    Tensor total = mg::zeros({}, mg::kFloat64);
    for (size_t k = 0; k < g.size(); ++k)
      if (g[k].defined()) total = total + (g[k] * dirs[k]).sum();
    return total;
  };
  check(what + " (second derivative)", s, inputs, o);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("create_graph: backward leaves a .grad that can be differentiated, and accumulates into it") {
  auto x = mg::tensor(std::vector<double>{1, -2, 0.5}).requires_grad_();
  (x * x * x).sum().backward({}, std::nullopt, /*create_graph=*/true);
  REQUIRE(x.grad().defined());
  CHECK(x.grad().requires_grad());  // d/dx sum x^3 = 3 x^2, with history
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 12, 0.75});
  x.grad().sum().backward();  // d/dx sum 3 x^2 = 6 x, added to the .grad there
  auto g = x.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(3 + 6));
  CHECK(g[1] == doctest::Approx(12 - 12));
  CHECK(g[2] == doctest::Approx(0.75 + 3));
}

TEST_CASE("autograd::grad returns gradients without touching .grad") {
  auto x = mg::tensor(std::vector<double>{0.5, 1.5}).requires_grad_();
  auto w = mg::tensor(std::vector<double>{2, -1}).requires_grad_();
  auto y = (x * w).sum();
  TL g = grad({y}, {x}, {}, true);
  CHECK(g[0].to_vector<double>() == std::vector<double>{2, -1});
  CHECK(!x.grad().defined());
  CHECK(!w.grad().defined());  // not even the leaves grad() did not ask for
  CHECK(!g[0].requires_grad());
  // Several outputs with their own seeds; an input they depend on only through another input
  // gets the whole derivative, as torch.autograd.grad gives.
  auto h = x * 3.0;
  auto z = (h * h).sum();
  TL both = grad({z, y}, {h, x}, {mg::tensor(2.0), mg::tensor(1.0)}, true);
  CHECK(both[0].to_vector<double>() == std::vector<double>{2 * 2 * 1.5, 2 * 2 * 4.5});
  CHECK(both[1].to_vector<double>() == std::vector<double>{2 * 18 * 0.5 + 2, 2 * 18 * 1.5 - 1});
  // Unused inputs raise unless allowed; inputs must require grad.
  auto unused = mg::tensor(std::vector<double>{1}).requires_grad_();
  try {
    grad({y}, {unused}, {}, true);
    FAIL("expected an AutogradError");
  } catch (const mg::AutogradError& e) {
    CHECK(contains(e.what(), "was not used"));
    CHECK(contains(e.what(), "allow_unused"));
  }
  CHECK(!grad({y}, {unused}, {}, true, false, true)[0].defined());
  CHECK_THROWS_AS(grad({y}, {mg::ones({2})}, {}, true), mg::AutogradError);
  CHECK_THROWS_AS(grad({x * 2.0}, {x}), mg::AutogradError);  // a non-scalar output needs a seed
}

TEST_CASE("create_graph: second derivatives of the elementwise ops") {
  auto a = away({2, 3}), b = away({3});
  a.requires_grad_(), b.requires_grad_();
  auto p = param({2, 3}, 0.5, 2);
  for (auto [name, f] : std::vector<std::pair<std::string, Fn>>{
           {"exp", [](const TL& x) { return mg::exp(x[0]); }},
           {"log", [](const TL& x) { return mg::log(x[0]); }},
           {"sqrt", [](const TL& x) { return mg::sqrt(x[0]); }},
           {"rsqrt", [](const TL& x) { return mg::rsqrt(x[0]); }},
           {"tanh", [](const TL& x) { return mg::tanh(x[0]); }},
           {"sigmoid", [](const TL& x) { return mg::sigmoid(x[0]); }},
           {"gelu", [](const TL& x) { return mg::gelu(x[0]); }},
           {"gelu tanh", [](const TL& x) { return mg::gelu(x[0], mg::GeluApprox::Tanh); }},
           {"silu", [](const TL& x) { return mg::silu(x[0]); }},
           {"erf", [](const TL& x) { return mg::erf(x[0]); }},
           {"pow 3", [](const TL& x) { return mg::pow(x[0], 3.0); }},
           {"pow -1.5", [](const TL& x) { return mg::pow(x[0], -1.5); }},
           {"neg, scalars", [](const TL& x) { return -(x[0] * 2.0 + 1.0) / 3.0 + (4.0 - x[0]); }},
       })
    check2(name, f, {p});
  // Kinks: relu, abs and clamp have zero second derivatives away from them.
  check2("relu", [](const TL& x) { return mg::relu(x[0]) * x[0]; }, {a});
  check2("abs", [](const TL& x) { return mg::abs(x[0]) * x[0]; }, {a});
  check2("clamp", [](const TL& x) { return mg::clamp(x[0], -0.9, 0.8) * x[0]; }, {a});
  check2("add, sub, mul, div broadcast",
         [](const TL& x) { return (x[0] + x[1]) * (x[0] - x[1] * 2.0) / (x[1] * x[1] + 1.0); }, {a, b});
  check2("pow tensor", [](const TL& x) { return mg::pow(x[0], x[1]); }, {p, b});
  check2("maximum, minimum", [](const TL& x) { return mg::maximum(x[0], x[1]) * mg::minimum(x[0], x[1] * 0.5); },
         {a, b});
  auto mask = mg::tensor(std::vector<bool>{true, false, true, false, false, true}, {2, 3});
  check2("where", [mask](const TL& x) { return mg::where(mask, x[0] * x[0], x[1] * x[0]); }, {a, b});
  check2("masked_fill", [mask](const TL& x) { return mg::masked_fill(x[0] * x[0], mask, 2.0); }, {a});
  check2("bias_gelu", [](const TL& x) { return mg::bias_gelu(x[0], x[1]); }, {a, b});
  check2("bias_gelu tanh", [](const TL& x) { return mg::bias_gelu(x[0], x[1], mg::GeluApprox::Tanh); }, {a, b});
  check2("in place", [](const TL& x) { return (x[0] * x[1]).mul_(x[1]).add_(x[0] * x[0]).relu_(); }, {a, b});
}

TEST_CASE("create_graph: second derivatives of reductions, views, matmul and linear") {
  auto x = param({3, 4, 5}), m = param({5, 3}), w = param({6, 5}), bias = param({6});
  check2("sum, mean", [](const TL& v) { return mg::sum(v[0] * v[0], {1}) * mg::mean(mg::exp(v[0]), {1}); }, {x});
  check2("var, std",
         [](const TL& v) {
           return mg::var(v[0], {0}) + mg::std(v[0] * v[0], {0}, 0) * mg::std(v[0], {0, 2}, 1, true).squeeze(0);
         },
         {x});
  check2("amax", [](const TL& v) { return mg::amax(v[0] * v[0], {1}); }, {x});
  check2("max over a dim", [](const TL& v) { return std::get<0>(mg::max(v[0] * v[0] + v[0], 2)); }, {x});
  check2("logsumexp", [](const TL& v) { return mg::logsumexp(v[0], {1, 2}); }, {x});
  check2("views",
         [](const TL& v) {
           Tensor t =
               v[0].transpose(0, 2).slice(1, 1, 4, 2).select(0, 3).unsqueeze(0).expand({2, 2, 3}).permute({2, 0, 1});
           return t.reshape({3, 4}) * t.reshape({3, 4});
         },
         {x});
  check2("matmul", [](const TL& v) { return mg::matmul(mg::tanh(v[0]), v[1]); }, {x, m});
  check2("linear", [](const TL& v) { return mg::linear(v[0] * v[0], v[1], v[2]); }, {x, w, bias});
  check2("cumsum, flip, repeat",
         [](const TL& v) {
           return mg::cumsum(v[0] * v[0], 1).flip({0, 2}).repeat({2, 1, 1});
         },
         {x});
  check2("sort, topk",
         [](const TL& v) {
           return std::get<0>(mg::sort(v[0] * v[0], 1, true)) + std::get<0>(mg::topk(mg::exp(v[0]), 4, 1));
         },
         {x});
  auto idx = indices({3, 2, 5}, 4), rows = indices({5}, 3), cols = indices({5}, 5);
  check2("gather, index_select, scatter_add, index_add, scatter",
         [idx, rows, cols](const TL& v) {
           Tensor y = v[0] * v[0];
           Tensor g = mg::gather(y, 1, idx) + mg::index_select(y, 0, rows).slice(0, 0, 3).slice(1, 0, 2);
           return mg::scatter_add(y, 1, idx, g * v[0].slice(1, 0, 2)) + mg::index_add(y, 2, cols, y * 0.5) +
                  mg::scatter(y, 2, cols.view({1, 1, 5}).expand({3, 4, 5}).contiguous(), mg::exp(v[0]));
         },
         {x});
}

TEST_CASE("create_graph: second derivatives of softmax, losses and normalisations") {
  auto x = param({4, 5}), y = param({4, 5}), cls = param({5}, 0.5, 2);
  auto t = mg::tensor(std::vector<int64_t>{1, -100, 4, 0});
  check2("softmax", [](const TL& v) { return mg::softmax(v[0], 1) * v[0]; }, {x});
  check2("log_softmax", [](const TL& v) { return mg::log_softmax(v[0] * v[0], 0); }, {x});
  check2("cross_entropy", [t](const TL& v) { return mg::cross_entropy(v[0] * v[0], t); }, {x});
  Tensor w = cls.detach();  // class weights get no gradient (as in PyTorch)
  check2("cross_entropy weighted, smoothed",
         [t, w](const TL& v) { return mg::cross_entropy(v[0] * v[1], t, w, mg::Reduction::None, -100, 0.2); }, {x, y});
  check2("nll_loss", [t, w](const TL& v) { return mg::nll_loss(mg::log_softmax(v[0], 1), t, w); }, {x});
  check2("mse_loss", [](const TL& v) { return mg::mse_loss(mg::tanh(v[0]), v[1]); }, {x, y});
  auto h = param({2, 3, 6}), g = param({6}), b = param({6});
  check2("layer_norm", [](const TL& v) { return mg::layer_norm(v[0], {6}, v[1], v[2]) * v[0]; }, {h, g, b});
  check2("rms_norm", [](const TL& v) { return mg::rms_norm(v[0], {6}, v[1]) * v[0]; }, {h, g});
  auto img = param({2, 4, 3, 2}), gw = param({4}), gb = param({4});
  check2("group_norm", [](const TL& v) { return mg::group_norm(v[0], 2, v[1], v[2]) * v[0]; }, {img, gw, gb});
}

TEST_CASE("create_graph: second derivatives of attention, dropout, convolution and pooling") {
  auto q = param({2, 5, 3}), k = param({2, 4, 3}), v = param({2, 4, 3});
  check2("attention", [](const TL& x) { return mg::scaled_dot_product_attention(x[0], x[1], x[2]); }, {q, k, v});
  auto qc = param({2, 4, 3});
  check2("attention causal",
         [](const TL& x) { return mg::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, true); }, {qc, k, v});
  auto mask = mg::tensor(std::vector<bool>{true,  false, true, true, false, true,  true, false, true, true,
                                           false, false, true, true, true,  false, true, false, true, true},
                         {5, 4});
  check2("attention with a mask",
         [mask](const TL& x) { return mg::scaled_dot_product_attention(x[0], x[1], x[2], mask); }, {q, k, v});
  auto add = param({1, 5, 4});
  check2("attention with an additive mask that requires grad",
         [](const TL& x) { return mg::scaled_dot_product_attention(x[0], x[1], x[2], x[3]); }, {q, k, v, add});
  check2("attention with dropout",
         [](const TL& x) {
           mg::manual_seed(3);
           return mg::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.3);
         },
         {q, k, v});
  auto d = param({3, 4});
  check2("dropout",
         [](const TL& x) {
           mg::manual_seed(5);
           return mg::dropout(x[0] * x[0], 0.4);
         },
         {d});
  auto img = param({2, 2, 5, 4}), w = param({4, 1, 2, 3}), cb = param({4});
  check2("conv2d (im2col lowering)",
         [](const TL& x) {
           return mg::conv2d(x[0], x[1], x[2], {1, 1}, {1, 0}, {1, 1}, 2) *
                  mg::conv2d(x[0], x[1], x[2], {1, 1}, {1, 0}, {1, 1}, 2);
         },
         {img, w, cb});
  auto pim = mg::tensor(std::vector<double>{0.1, 0.9,  -0.3, 0.4,  1.2, -0.8, 0.5, 0.2,  -1.0, 0.7,
                                            0.3, -0.2, 0.6,  -0.6, 1.1, 0.0,  0.8, -0.4, 0.25, 1.3},
                        {1, 1, 4, 5})
                 .requires_grad_();
  check2("max_pool2d", [](const TL& x) { return mg::max_pool2d(mg::exp(x[0]), {2, 2}, {1, 2}); }, {pim});
  check2("avg_pool2d", [](const TL& x) { return mg::avg_pool2d(x[0] * x[0], {2, 3}, {2, 1}, {1, 1}); }, {pim});
}

TEST_CASE("create_graph: cumprod's second derivative, zeros included") {
  check2("cumprod", [](const TL& x) { return mg::cumprod(x[0], 1); }, {param({3, 5}, 0.5, 1.5)});
  check2("cumprod dim 0", [](const TL& x) { return mg::cumprod(x[0].t(), 0); }, {param({4, 3})});
  // One zero and two zeros in a line: the gradient before a zero needs the products past it.
  check2("cumprod with zeros", [](const TL& x) { return mg::cumprod(x[0] * x[1], 1); },
         {param({2, 5}), mg::tensor(std::vector<double>{1, 0, 1, 1, 1, 1, 0, 1, 0, 1}, {2, 5})});
  check2("cumprod 0-d", [](const TL& x) { return mg::cumprod(x[0], 0) * x[0]; }, {param({})});
  // Its first derivative stays exact, zeros included.
  auto z = mg::tensor(std::vector<double>{2, 0, 3, 0.5}).requires_grad_();
  mg::cumprod(z, 0).sum().backward();
  // d/dz_i sum_j prod_{k<=j} z_k: only terms whose product skips the zero survive.
  auto g = z.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(1.0));
  CHECK(g[1] == doctest::Approx(2 + 2 * 3 + 2 * 3 * 0.5));
  CHECK(g[2] == doctest::Approx(0.0));
  CHECK(g[3] == doctest::Approx(0.0));
}

TEST_CASE("create_graph: a gradient penalty on an MLP matches finite differences") {
  auto x = param({5, 4}), w1 = param({6, 4}), b1 = param({6}), w2 = param({3, 6}), b2 = param({3});
  auto target = mg::tensor(std::vector<int64_t>{0, 2, 1, 1, 2});
  auto reg = uniform({5, 3});
  // The loss of a small MLP; the penalty is the squared norm of its gradient w.r.t. the input (as in
  // WGAN-GP) and w.r.t. the first layer's weight.
  auto loss_of = [target, reg](const TL& p) {
    Tensor h = mg::gelu(mg::linear(p[0], p[1], p[2]));
    Tensor logits = mg::linear(mg::tanh(h) + mg::sigmoid(h) * mg::relu(h), p[3], p[4]);
    return mg::cross_entropy(logits, target) + mg::mse_loss(mg::softmax(logits, 1), reg) +
           mg::log_softmax(logits, 1).mean();
  };
  auto penalty = [&](const TL& p) {
    mg::EnableGradGuard grad_mode;
    TL g = grad({loss_of(p)}, {p[0], p[1]}, {}, std::nullopt, true);
    return (g[0] * g[0]).sum() + (g[1] * g[1]).sum();
  };
  check("gradient penalty", penalty, {x, w1, b1, w2, b2});

  // The same penalty through backward(create_graph) and .grad, as a training step writes it.
  for (auto& p : {x, w1}) p.set_grad(Tensor());
  loss_of({x, w1, b1, w2, b2}).backward({}, std::nullopt, true);
  Tensor gp = (x.grad() * x.grad()).sum() + (w1.grad() * w1.grad()).sum();
  for (auto& p : {x, w1, b1, w2, b2}) p.set_grad(Tensor());
  gp.backward();
  TL want = grad({penalty({x, w1, b1, w2, b2})}, {x, w1, b1, w2, b2});
  TL got{x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad()};
  for (size_t i = 0; i < got.size(); ++i) CHECK(mg::allclose(got[i], want[i], 1e-10, 1e-12));
}

namespace {
// Hessian-vector products of `loss` w.r.t. `params` (double backward) against central differences of
// the gradient along v: (grad(p + eps v) - grad(p - eps v)) / (2 eps). Their truncation error falls
// as eps^2 (about 1e-6 at eps = 1e-5 for a GPT moved along all parameters at once), their rounding
// error as 1 / eps: eps = 1e-6 keeps both near 1e-9.
void check_hvp(const std::string& what, const std::vector<Tensor>& params, const std::function<Tensor()>& loss) {
  INFO(what);
  TL v;
  for (auto& p : params) v.push_back(uniform(p.shape()));
  TL g = grad({loss()}, params, {}, std::nullopt, true);
  Tensor gv = mg::zeros({}, mg::kFloat64);
  for (size_t i = 0; i < g.size(); ++i) gv = gv + (g[i] * v[i]).sum();
  TL hv = grad({gv}, params, {}, std::nullopt, false, true);
  const double eps = 1e-6;
  auto grad_at = [&](double step) {
    {
      mg::NoGradGuard ng;
      for (size_t i = 0; i < params.size(); ++i) Tensor(params[i]).add_(v[i], step);
    }
    TL r = grad({loss()}, params);
    {
      mg::NoGradGuard ng;
      for (size_t i = 0; i < params.size(); ++i) Tensor(params[i]).add_(v[i], -step);
    }
    return r;
  };
  TL plus = grad_at(eps), minus = grad_at(-eps);
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    auto h = hv[i].defined() ? hv[i].to_vector<double>() : std::vector<double>(size_t(params[i].numel()), 0.0);
    auto a = plus[i].to_vector<double>(), b = minus[i].to_vector<double>();
    for (size_t j = 0; j < h.size(); ++j) {
      double num = (a[j] - b[j]) / (2 * eps);
      worst = std::max(worst, std::abs(h[j] - num) / (1e-6 + 1e-4 * std::abs(num)));
    }
  }
  CHECK_MESSAGE(worst <= 1.0, what, ": worst |Hv - finite difference| / (1e-6 + 1e-4 |fd|) = ", worst);
}
}  // namespace

TEST_CASE("create_graph: Hessian-vector products of a GPT match finite differences of the gradient") {
  auto idx = indices({2, 6}, 11), targets = indices({2, 6}, 11);
  for (int variant = 0; variant < 3; ++variant) {
    mg::nn::GPTConfig c;
    c.vocab_size = 11, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 8;
    c.options = mg::TensorOptions(mg::kFloat64);
    c.fused_attention = variant >= 1;
    c.checkpoint_every = variant == 2 ? 1 : 0;
    mg::manual_seed(17);
    mg::nn::GPT gpt(c);
    check_hvp(variant == 0   ? "GPT"
              : variant == 1 ? "GPT, fused attention"
                             : "GPT, fused attention, checkpointed blocks",
              gpt.parameters(), [&] { return gpt.loss(idx, targets); });
  }
}

TEST_CASE("create_graph: a double backward leaves no bytes behind") {
  const int64_t before = mg::memory_stats(mg::kCPU).allocated;
  {
    auto x = param({8, 6}), w = param({5, 6});
    Tensor loss = mg::cross_entropy(mg::layer_norm(mg::linear(x, w), {5}), mg::tensor(std::vector<int64_t>(8, 1)));
    TL g = grad({loss}, {x, w}, {}, std::nullopt, true);
    ((g[0] * g[0]).sum() + (g[1] * g[1]).sum()).backward();
    CHECK(x.grad().defined());
    x.set_grad(Tensor()), w.set_grad(Tensor());
  }
  CHECK(mg::memory_stats(mg::kCPU).allocated == before);
}
