// The backward engine and the autograd API around it: seeds, retain_graph and accumulation, grad
// modes, detach, in-place ops and version checks, custom functions, and the release of saved tensors
// (asserted in exact Activation bytes). Hooks are in test_hooks.cpp.
#include <doctest/doctest.h>

#include <any>
#include <cmath>
#include <string>

#include <memgrad/memgrad.h>

#include "autograd/engine_util.h"

using namespace engine_test;

TEST_CASE("engine: backward of a scalar seeds one") {
  auto x = f64({1, -2, 3}, {3}).requires_grad_();
  auto y = (x * x * x).sum();  // dy/dx = 3 x^2
  y.backward();
  check_close(x.grad(), {3, 12, 27});
  CHECK(x.grad().dtype() == mg::kFloat64);
}

TEST_CASE("engine: backward with an explicit gradient on a non-scalar") {
  auto x = f64({1, 2, 3, 4}, {2, 2}).requires_grad_();
  auto y = x * x;  // dy/dx = 2x, so x.grad = 2 x g
  y.backward(f64({1, 0.5, -1, 2}, {2, 2}));
  check_close(x.grad(), {2, 2, -6, 16});

  SUBCASE("a non-scalar without a gradient raises") {
    auto z = x * 2.0;
    auto msg = autograd_error([&] { z.backward(); });
    CHECK(contains(msg, "scalar"));
    CHECK(contains(msg, "[2, 2]"));
  }
  SUBCASE("a gradient of the wrong shape raises") {
    auto z = x * 2.0;
    CHECK_THROWS_AS(z.backward(f64({1, 2, 3}, {3})), mg::ShapeError);
  }
  SUBCASE("a tensor that does not require grad raises") {
    auto c = f64({1, 2}, {2}).sum();
    CHECK_THROWS_AS(c.backward(), mg::AutogradError);
  }
}

TEST_CASE("engine: retain_graph allows a second backward and gradients accumulate") {
  auto x = f64({0.5, -1.5}, {2}).requires_grad_();
  auto y = mg::exp(x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  check_close(x.grad(), {std::exp(0.5), std::exp(-1.5)});
  y.backward();
  check_close(x.grad(), {2 * std::exp(0.5), 2 * std::exp(-1.5)});

  // A separate graph adds into the same .grad.
  (x * 3.0).sum().backward();
  check_close(x.grad(), {2 * std::exp(0.5) + 3, 2 * std::exp(-1.5) + 3});

  // Without retain_graph, the second backward finds the saved tensors gone and names the node.
  auto z = mg::exp(x * 2.0);
  z.backward(mg::ones_like(z));
  auto msg = autograd_error([&] { z.backward(mg::ones_like(z)); });
  CHECK(contains(msg, "exp"));
  CHECK(contains(msg, "second time"));
  CHECK(contains(msg, "retain_graph"));
}

TEST_CASE("engine: retain_grad keeps the gradient of a non-leaf") {
  auto x = f64({1, 2, 3}, {3}).requires_grad_();
  auto h = x * 2.0;
  auto k = h + 1.0;  // no retain_grad: its .grad stays undefined
  h.retain_grad();
  auto y = (h * k).sum();  // dy/dh = k + h = 2h + 1, dy/dx = 2 (2h + 1)
  y.backward(Tensor(), true);
  check_close(h.grad(), {5, 9, 13});
  check_close(x.grad(), {10, 18, 26});
  CHECK(!k.grad().defined());
  // A second backward accumulates into the retained gradient as it does into a leaf's.
  y.backward();
  check_close(h.grad(), {10, 18, 26});
  CHECK(!h.is_leaf());
}

TEST_CASE("engine: NoGradGuard and EnableGradGuard nest") {
  auto x = f64({1, 2}, {2}).requires_grad_();
  CHECK(mg::GradMode::is_enabled());
  {
    mg::NoGradGuard off;
    CHECK(!mg::GradMode::is_enabled());
    auto y = x * 2.0;
    CHECK(!y.requires_grad());
    CHECK(y.is_leaf());
    {
      mg::EnableGradGuard on;
      CHECK(mg::GradMode::is_enabled());
      auto z = x * 2.0;
      CHECK(z.requires_grad());
      CHECK(z.grad_fn() != nullptr);
      {
        mg::NoGradGuard off_again;
        CHECK(!(x * 2.0).requires_grad());
      }
      CHECK(mg::GradMode::is_enabled());
    }
    CHECK(!mg::GradMode::is_enabled());
    // In-place changes to a leaf are allowed here (that is how optimizers update parameters).
    x.add_(1.0);
  }
  CHECK(mg::GradMode::is_enabled());
  check_close(x, {2, 3});
  CHECK((x * 2.0).requires_grad());
}

TEST_CASE("engine: detach shares storage and has no history") {
  auto x = f64({1, 2, 3}, {3}).requires_grad_();
  auto h = x * 2.0;
  auto d = h.detach();
  CHECK(d.storage() == h.storage());
  CHECK(d.raw_data() == h.raw_data());
  CHECK(!d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.grad_fn() == nullptr);
  CHECK(!(d * 3.0).requires_grad());
  // Writes through the detached alias are visible to the original and bump the shared version.
  auto v = h.version();
  d.mul_(10.0);
  CHECK(h.version() == v + 1);
  check_close(h, {20, 40, 60});
  // detach_() cuts a tensor out of the graph in place.
  auto k = x * 1.0;
  k.detach_();
  CHECK(!k.requires_grad());
  CHECK(k.is_leaf());
}

TEST_CASE("engine: requires_grad_ on non-floating tensors raises") {
  auto i = mg::tensor(std::vector<int64_t>{1, 2});
  CHECK_THROWS_AS(i.requires_grad_(), mg::DTypeError);
  auto i32 = mg::tensor(std::vector<int32_t>{1, 2});
  CHECK_THROWS_AS(i32.requires_grad_(), mg::DTypeError);
  auto b = mg::tensor(std::vector<bool>{true, false});
  CHECK_THROWS_AS(b.requires_grad_(), mg::DTypeError);
  CHECK_NOTHROW(i.requires_grad_(false));
  // A non-leaf cannot switch requires_grad off: that is detach's job.
  auto x = f64({1}, {1}).requires_grad_();
  auto y = x * 2.0;
  CHECK_THROWS_AS(y.requires_grad_(false), mg::AutogradError);
}

TEST_CASE("engine: in-place ops differentiate correctly and bump the version") {
  auto x = mg::tensor(std::vector<double>{0.7, -0.4, 1.3, -1.1, 0.2, -0.9}, {2, 3}).requires_grad_();
  auto y = mg::tensor(std::vector<double>{-0.3, 0.8, 0.5}, {3}).requires_grad_();
  auto mask = mg::tensor(std::vector<bool>{true, false, false, false, true, false}, {2, 3});

  // Each in-place op sits on a non-leaf intermediate; gradcheck compares against finite differences.
  gradcheck_ok("add_ tensor with alpha",
               [](const TL& v) {
                 auto h = v[0] * 1.0;
                 h.add_(v[1], 2.5);
                 return h * h;
               },
               {x, y});
  gradcheck_ok("add_ scalar", [](const TL& v) { return (v[0] * v[0]).add_(3.0) * v[0]; }, {x});
  gradcheck_ok("sub_", [](const TL& v) { return (v[0] * v[0]).sub_(v[1]); }, {x, y});
  gradcheck_ok("mul_ tensor",
               [](const TL& v) {
                 auto h = v[0] * 2.0;  // mul by a scalar saves nothing, so h may change
                 h.mul_(v[1]);
                 return h;
               },
               {x, y});
  gradcheck_ok("mul_ scalar", [](const TL& v) { return (v[0] * v[0]).mul_(-2.0); }, {x});
  gradcheck_ok("div_ tensor", [](const TL& v) { return (v[0] * 2.0).div_(mg::exp(v[1])); }, {x, y});
  gradcheck_ok("div_ scalar", [](const TL& v) { return (v[0] * v[0]).div_(4.0); }, {x});
  gradcheck_ok("relu_", [](const TL& v) { return (v[0] * 1.0).relu_() * v[0]; }, {x});
  gradcheck_ok("clamp_", [](const TL& v) { return (v[0] * 1.0).clamp_(-0.5, 0.5) * v[0]; }, {x});
  gradcheck_ok("masked_fill_", [mask](const TL& v) { return (v[0] * v[0]).masked_fill_(mask, 4.0); }, {x});
  gradcheck_ok("zero_ cuts the old value", [](const TL& v) { return (v[0] * 3.0).zero_() + v[0] * v[0]; }, {x});
  gradcheck_ok("fill_ cuts the old value", [](const TL& v) { return (v[0] * 3.0).fill_(2.0) * v[0]; }, {x});
  gradcheck_ok("copy_ routes to the source",
               [](const TL& v) {
                 auto h = v[0] * 3.0;
                 h.copy_(v[1] * v[1]);  // broadcast [3] -> [2, 3]
                 return h * v[0];
               },
               {x, y});
  gradcheck_ok("copy_ into a buffer without history",
               [](const TL& v) {
                 auto buf = mg::zeros({2, 3}, mg::kFloat64);
                 buf.copy_(v[0]);
                 return mg::exp(buf);
               },
               {x});
  gradcheck_ok("add_ into a buffer without history",
               [](const TL& v) {
                 auto buf = mg::ones({2, 3}, mg::kFloat64);
                 buf.add_(v[0] * v[1]);
                 return buf * buf;
               },
               {x, y});

  // Every in-place op bumps the version counter once.
  auto h = x.detach().clone();
  auto bumps = [&](const char* what, const std::function<void()>& op) {
    INFO(std::string(what));
    auto before = h.version();
    op();
    CHECK(h.version() == before + 1);
  };
  bumps("add_", [&] { h.add_(y.detach()); });
  bumps("add_ scalar", [&] { h.add_(1.0); });
  bumps("sub_", [&] { h.sub_(y.detach()); });
  bumps("mul_", [&] { h.mul_(y.detach()); });
  bumps("mul_ scalar", [&] { h.mul_(2.0); });
  bumps("div_", [&] { h.div_(2.0); });
  bumps("relu_", [&] { h.relu_(); });
  bumps("clamp_", [&] { h.clamp_(-1, 1); });
  bumps("masked_fill_", [&] { h.masked_fill_(mask, 0.0); });
  bumps("copy_", [&] { h.copy_(y.detach()); });
  bumps("fill_", [&] { h.fill_(1.0); });
  bumps("zero_", [&] { h.zero_(); });
}

TEST_CASE("engine: modifying a saved tensor before backward raises with the versions") {
  auto x = f64({1, 2, 3}, {3}).requires_grad_();
  auto h = x * 1.0;
  auto y = (h * h).sum();  // mul saves h at its current version
  auto saved_version = h.version();
  h.add_(1.0);
  auto msg = autograd_error([&] { y.backward(); });
  CHECK(contains(msg, "modified by an in-place operation"));
  CHECK(contains(msg, "expected version " + std::to_string(saved_version)));
  CHECK(contains(msg, "got version " + std::to_string(saved_version + 1)));

  // An op that saves its output (exp) is caught the same way.
  auto e = mg::exp(x);
  e.mul_(2.0);
  CHECK_THROWS_AS(e.sum().backward(), mg::AutogradError);

  // A modification the backward does not depend on is fine: add saves nothing.
  auto a = x * 1.0;
  auto s = (a + x).sum();
  a.mul_(5.0);
  s.backward();
  check_close(x.grad(), {2, 2, 2});
}

TEST_CASE("engine: in-place on a leaf that requires grad raises") {
  auto x = f64({1, 2}, {2}).requires_grad_();
  auto msg = autograd_error([&] { x.add_(1.0); });
  CHECK(contains(msg, "add_"));
  CHECK(contains(msg, "leaf"));
  CHECK_THROWS_AS(x.relu_(), mg::AutogradError);
  CHECK_THROWS_AS(x.zero_(), mg::AutogradError);
  CHECK_THROWS_AS(x.copy_(f64({3, 4}, {2})), mg::AutogradError);
  CHECK_THROWS_AS(x.masked_fill_(mg::tensor(std::vector<bool>{true, false}), 0.0), mg::AutogradError);
  check_close(x, {1, 2});  // nothing was written
  CHECK(x.version() == 0);
}

namespace {

struct Cube : mg::autograd::Function<Cube> {
  static TL forward(mg::autograd::FunctionCtx& ctx, const TL& in) {
    ctx.save_for_backward({in[0]});
    ctx.data["power"] = 3.0;
    return {in[0] * in[0] * in[0]};
  }
  static TL backward(mg::autograd::FunctionCtx& ctx, const TL& g) {
    double p = std::any_cast<double>(ctx.data.at("power"));
    Tensor x = ctx.saved()[0];
    return {g[0] * p * x * x};
  }
};

// Two inputs, two outputs: (a * b, a + b).
struct MulAdd : mg::autograd::Function<MulAdd> {
  static inline std::vector<bool> needs;
  static TL forward(mg::autograd::FunctionCtx& ctx, const TL& in) {
    CHECK(!mg::GradMode::is_enabled());  // forward runs without recording
    ctx.save_for_backward({in[0], in[1]});
    return {in[0] * in[1], in[0] + in[1]};
  }
  static TL backward(mg::autograd::FunctionCtx& ctx, const TL& g) {
    needs = {ctx.needs_input_grad(0), ctx.needs_input_grad(1)};
    auto s = ctx.saved();
    return {ctx.needs_input_grad(0) ? g[0] * s[1] + g[1] : Tensor(),
            ctx.needs_input_grad(1) ? g[0] * s[0] + g[1] : Tensor()};
  }
};

}  // namespace

TEST_CASE("engine: custom functions (CRTP and apply_function)") {
  auto x = f64({1, -2, 0.5}, {3}).requires_grad_();
  auto y = Cube::apply({x})[0];
  CHECK(y.requires_grad());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "CustomFunction");
  check_close(y, {1, -8, 0.125});
  y.sum().backward();
  check_close(x.grad(), {3, 12, 0.75});
  gradcheck_ok("Cube", [](const TL& v) { return Cube::apply(v, "Cube")[0]; }, {x});

  SUBCASE("needs_input_grad follows the inputs") {
    auto a = f64({2, 3}, {2}).requires_grad_();
    auto b = f64({5, 7}, {2});
    auto out = MulAdd::apply({a, b});
    (out[0] + out[1] * 2.0).sum().backward();
    CHECK(MulAdd::needs == std::vector<bool>{true, false});
    check_close(a.grad(), {7, 9});  // b + 2
    gradcheck_ok("MulAdd both",
                 [](const TL& v) {
                   auto o = MulAdd::apply(v);
                   return o[0] * o[1];
                 },
                 {f64({0.5, -1}, {2}).requires_grad_(), f64({2, 0.25}, {2}).requires_grad_()});
    gradcheck_ok("MulAdd one output unused", [](const TL& v) { return MulAdd::apply(v)[1] * 1.0; },
                 {f64({0.5, -1}, {2}).requires_grad_(), f64({2, 0.25}, {2}).requires_grad_()});
  }
  SUBCASE("apply_function with ctx.data and a named node") {
    auto fwd = [](mg::autograd::FunctionCtx& ctx, const TL& in) {
      ctx.data["scale"] = 4.0;
      return TL{in[0] * 4.0};
    };
    auto bwd = [](mg::autograd::FunctionCtx& ctx, const TL& g) {
      return TL{g[0] * std::any_cast<double>(ctx.data.at("scale"))};
    };
    auto z = mg::autograd::apply_function("Scale4", fwd, bwd, {x});
    REQUIRE(z[0].grad_fn() != nullptr);
    CHECK(z[0].grad_fn()->name() == "Scale4");
    x.set_grad(Tensor());
    z[0].sum().backward();
    check_close(x.grad(), {4, 4, 4});
  }
  SUBCASE("a backward returning the wrong number of gradients raises") {
    auto bad = mg::autograd::apply_function(
        "Bad", [](mg::autograd::FunctionCtx&, const TL& in) { return TL{in[0] * 2.0}; },
        [](mg::autograd::FunctionCtx&, const TL& g) {
          return TL{g[0], g[0]};
        },
        {x});
    auto msg = autograd_error([&] { bad[0].sum().backward(); });
    CHECK(contains(msg, "Bad"));
  }
  SUBCASE("no inputs require grad: no node") {
    auto c = f64({1, 2}, {2});
    auto out = Cube::apply({c})[0];
    CHECK(!out.requires_grad());
    CHECK(out.grad_fn() == nullptr);
  }
}

TEST_CASE("engine: a diamond graph accumulates both paths") {
  auto x = f64({0.5, -1, 2}, {3}).requires_grad_();
  auto h = x * 2.0;
  auto a = mg::exp(h);
  auto b = h * h;
  (a + b).sum().backward();  // dL/dx = 2 (exp(2x) + 4x)
  check_close(x.grad(), {2 * (std::exp(1.0) + 2), 2 * (std::exp(-2.0) - 4), 2 * (std::exp(4.0) + 8)});

  // One tensor used twice by one op, and a leaf reached by several paths of different lengths.
  auto w = f64({3, -2}, {2}).requires_grad_();
  auto y = (w * w + w * 3.0 + mg::exp(w) * w).sum();  // 2w + 3 + exp(w)(1 + w)
  y.backward();
  check_close(w.grad(), {6 + 3 + std::exp(3.0) * 4, -4 + 3 + std::exp(-2.0) * -1});
}

TEST_CASE("engine: a second gradient for one tensor adds into the first in place (exact bytes)") {
  // w is used by two products, as a tied embedding is by its lookup and the lm head: each product's
  // backward makes a fresh buffer for w, and the second is added into the first, not into a third.
  const int64_t n = 256, bytes = n * 4;  // a multiple of the allocator's 512-byte rounding
  auto w = mg::randn({n}).requires_grad_();
  auto a = mg::randn({n}), b = mg::randn({n}), g = mg::ones({n});
  auto y = w * a + w * b;
  mg::reset_peak(mg::kCPU);
  const mg::MemoryStats before = mg::memory_stats(mg::kCPU);
  y.backward(g);  // add passes g on as it is; the products' backward allocate g * a and g * b
  const mg::MemoryStats after = mg::memory_stats(mg::kCPU);
  CHECK(after.total_allocated - before.total_allocated == 2 * bytes);
  CHECK(after.peak_allocated - before.allocated == 2 * bytes);
  check_close(w.grad(), values(a + b));  // g * a + g * b with g = 1, in the same float32 sums

  SUBCASE("a buffer the caller holds is never written: the seed reaches w twice") {
    auto v = mg::randn({n}).requires_grad_();
    (v + v).backward(g);  // add's backward sends g itself to both of v's slots
    check_close(g, std::vector<double>(n, 1.0));
    check_close(v.grad(), std::vector<double>(n, 2.0));
  }
}

TEST_CASE("engine: saved tensors are freed after their node ran (exact Activation bytes)") {
  // 256 float32 values are 1024 bytes, a multiple of the allocator's 512-byte rounding. Saved op
  // outputs count as Activation; saved leaves keep their own category (Input here).
  const int64_t n = 256, bytes = n * 4;
  const int64_t base = activation_bytes();
  auto x = mg::randn({n}).requires_grad_();
  auto w = mg::randn({n}).requires_grad_();
  const int64_t inputs = mg::memory_stats(mg::kCPU).category(mg::Category::Input);
  const int64_t grads = mg::memory_stats(mg::kCPU).category(mg::Category::Gradient);
  // h = x * w saves the leaves x, w; e = exp(h) saves e; p = e * h saves e and h.
  auto forward = [&] {
    auto h = x * w;
    CHECK(activation_bytes() == base);
    auto e = mg::exp(h);
    CHECK(activation_bytes() == base + bytes);
    auto p = e * h;
    CHECK(activation_bytes() == base + 2 * bytes);  // e is counted once though saved twice
    return p.sum();
  };

  SUBCASE("without retain_graph") {
    auto loss = forward();
    CHECK(activation_bytes() == base + 2 * bytes);
    CHECK(mg::memory_stats(mg::kCPU).category(mg::Category::Input) == inputs);
    loss.backward();
    CHECK(activation_bytes() == base);  // every saved tensor released, though the graph is alive
    REQUIRE(x.grad().defined());
    CHECK(mg::memory_stats(mg::kCPU).category(mg::Category::Input) == inputs);
    CHECK(mg::memory_stats(mg::kCPU).category(mg::Category::Gradient) == grads + 2 * bytes);  // x.grad, w.grad
  }
  SUBCASE("with retain_graph, until the graph dies") {
    auto loss = forward();
    loss.backward(Tensor(), true);
    CHECK(activation_bytes() == base + 2 * bytes);
    loss.backward(Tensor(), true);
    CHECK(activation_bytes() == base + 2 * bytes);
    loss = Tensor();  // the last handle on the graph
    CHECK(activation_bytes() == base);
  }
  SUBCASE("a graph dropped without backward frees them too") {
    {
      auto loss = forward();
      CHECK(activation_bytes() == base + 2 * bytes);
    }
    CHECK(activation_bytes() == base);
  }
  SUBCASE("a custom function's saved tensors") {
    auto y = Cube::apply({x * 1.0})[0];  // saves the (Temporary) product
    CHECK(activation_bytes() == base + bytes);
    y.sum().backward();
    CHECK(activation_bytes() == base);
  }
}

TEST_CASE("engine: K micro-batches with loss / K equal one K-times larger batch") {
  const int64_t k = 4, b = 3, d_in = 5, d_out = 2;
  mg::manual_seed(99);
  auto x = mg::randn({k * b, d_in}, mg::kFloat64);
  auto t = mg::randn({k * b, d_out}, mg::kFloat64);
  auto w_init = mg::randn({d_out, d_in}, mg::kFloat64), b_init = mg::randn({d_out}, mg::kFloat64);

  auto w_big = w_init.clone().requires_grad_(), b_big = b_init.clone().requires_grad_();
  mg::mse_loss(mg::tanh(mg::linear(x, w_big, b_big)), t).backward();

  auto w = w_init.clone().requires_grad_(), bias = b_init.clone().requires_grad_();
  for (int64_t i = 0; i < k; ++i) {
    auto xs = x.narrow(0, i * b, b), ts = t.narrow(0, i * b, b);
    (mg::mse_loss(mg::tanh(mg::linear(xs, w, bias)), ts) / double(k)).backward();
  }
  CHECK(mg::allclose(w.grad(), w_big.grad(), 1e-12, 1e-14));
  CHECK(mg::allclose(bias.grad(), b_big.grad(), 1e-12, 1e-14));
  // And the accumulated gradient is not trivially zero.
  CHECK(mg::max(mg::abs(w.grad())).item<double>() > 1e-3);
}

TEST_CASE("engine: mixed dtypes get gradients in their own dtype") {
  auto a = mg::tensor(std::vector<float>{1.5f, -2.0f}, {2}).requires_grad_();
  auto b = f64({0.25, 4}, {2}).requires_grad_();
  (a * b).sum().backward();
  CHECK(a.grad().dtype() == mg::kFloat32);
  CHECK(b.grad().dtype() == mg::kFloat64);
  check_close(a.grad(), {0.25, 4});
  check_close(b.grad(), {1.5, -2});

  SUBCASE("a seed gradient of another dtype is converted to the output's dtype") {
    auto x = f64({0.5, -1}, {2}).requires_grad_();
    auto y = mg::exp(x);
    y.backward(mg::tensor(std::vector<float>{1.0f, 2.0f}, {2}));
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == mg::kFloat64);
    check_close(x.grad(), {std::exp(0.5), 2 * std::exp(-1.0)});
  }
}

TEST_CASE("engine: retain_grad on the root and hooks on the root") {
  auto x = f64({1, 2}, {2}).requires_grad_();
  auto y = x * 3.0;
  y.retain_grad();
  Tensor seen;
  y.register_hook([&](const Tensor& g) { return seen = g.clone(), Tensor(); });
  y.backward(f64({0.5, -1}, {2}));
  check_close(y.grad(), {0.5, -1});
  check_close(seen, {0.5, -1});
  check_close(x.grad(), {1.5, -3});
}
