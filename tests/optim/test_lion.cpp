// Lion (optim/lion.h), the optimizer docs/optimizers.md adds as its worked example. Its steps match
// a reference written after lion-pytorch in the op case list (tests/ops/cases_multi_tensor.cpp:
// lion_step, fixture from tests/reference/make_fixtures.py); here: its formula by hand, its state
// in the ledger, a state_dict that continues bit for bit, its options, and its registry entry.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include <memgrad/memgrad.h>

#include "expect_error.h"

using namespace mg;

TEST_CASE("Lion: one step by hand: decay, then lr against the sign of the interpolation, then the momentum") {
  Tensor p = tensor(std::vector<float>{1, -2, 3, 0.5f}).requires_grad_();
  optim::Lion opt(std::vector<Tensor>{p}, optim::LionOptions(0.1).betas(0.9, 0.99).weight_decay(0.5));
  // Step 1 (m = 0): c = 0.1 g, so p = p * (1 - 0.05) - 0.1 * sign(g); m = 0.01 g.
  p.set_grad(tensor(std::vector<float>{2, 0, -4, 1}));
  opt.step();
  const std::vector<float> p1 = p.to_vector<float>();
  const std::vector<float> want1 = {1 * 0.95f - 0.1f, -2 * 0.95f, 3 * 0.95f + 0.1f, 0.5f * 0.95f - 0.1f};
  for (size_t i = 0; i < 4; ++i) CHECK(p1[i] == doctest::Approx(want1[i]).epsilon(1e-6));
  const Tensor m = opt.state_dict().at("state.0.exp_avg");
  CHECK(m.to_vector<float>()[0] == doctest::Approx(0.02).epsilon(1e-6));
  // Step 2, a gradient against the momentum but smaller than it: c = 0.9 * 0.02 - 0.1 * 0.1 = 0.008 > 0,
  // so the parameter keeps moving as the momentum says (element 0), where Adam's first step would not.
  p.set_grad(tensor(std::vector<float>{-0.1f, 0, 0, 0}));
  opt.step();
  CHECK(p.to_vector<float>()[0] == doctest::Approx(want1[0] * 0.95f - 0.1f).epsilon(1e-6));
}

TEST_CASE("Lion: an interpolation that cancels to rounding takes torch's sign (one fused multiply-add)") {
  // lion-pytorch computes exp_avg * beta1, rounded, then .add(grad, alpha=1 - beta1): one fused
  // multiply-add, which keeps the rounding error of grad * (1 - beta1). Where exp_avg * beta1 rounds to
  // exactly -(grad * (1 - beta1) rounded), an unfused sum is 0 (no step) and the fused one is that
  // error, whose sign steps the parameter by lr. rules::lion writes the fma out, so neither the CPU loop
  // nor the CUDA kernel depends on whether its compiler contracts the sum.
  const float beta1 = float(0.9), one_minus = float(1 - 0.9);  // as LionCoeffs rounds them
  // A gradient whose product with 1 - beta1 is not exact, and a momentum whose product with beta1
  // rounds to minus that product rounded (found among the floats next to the quotient).
  float g = 0, m = 0;
  for (float candidate : {1.0f / 3, 0.7f, 1.1f, 2.3f, 0.37f}) {
    const volatile float product = candidate * one_minus;  // volatile: rounded, never contracted
    if (double(candidate) * double(one_minus) == double(product)) continue;
    float x = std::nextafter(-product / beta1, -1.0f);
    for (int i = 0; i < 8 && g == 0; ++i, x = std::nextafter(x, 0.0f)) {
      const volatile float rounded = x * beta1;
      if (rounded == -product) g = candidate, m = x;
    }
    if (g != 0) break;
  }
  REQUIRE(g != 0);
  const volatile float rounded = m * beta1;
  const double fused = double(rounded) + double(g) * double(one_minus);  // exact in double: the fma's sign
  REQUIRE(fused != 0);
  const double lr = 0.1;
  Tensor p = tensor(std::vector<float>{1}).requires_grad_();
  optim::Lion opt(std::vector<Tensor>{p}, optim::LionOptions(lr).betas(0.9, 0.99));
  p.set_grad(tensor(std::vector<float>{0}));
  opt.step();  // a step with a zero gradient makes the state and leaves p and the momentum as they are
  auto state = opt.state_dict();
  state.at("state.0.exp_avg") = tensor(std::vector<float>{m});
  opt.load_state_dict(state);
  p.set_grad(tensor(std::vector<float>{g}));
  opt.step();
  // p = fma(sign, -lr, p): exact in double, rounded once.
  CHECK(p.to_vector<float>()[0] == float(1.0 + double(float(-lr)) * (fused > 0 ? 1 : -1)));
}

TEST_CASE("Lion: float64 parameters follow the rule in double, step after step") {
  // The formula in double beside the kernel's float64 loop; the gradients flip sign and shrink at
  // odd steps so both branches of the sign (momentum wins, gradient wins) occur, and zeros give 0.
  manual_seed(7);
  const int64_t n = 1000;
  Tensor p = randn({n}, kFloat64).requires_grad_();
  std::vector<double> x = p.to_vector<double>(), m(size_t(n), 0.0);
  const double lr = 3e-3, b1 = 0.9, b2 = 0.99, wd = 0.2;
  optim::Lion opt(std::vector<Tensor>{p}, optim::LionOptions(lr).betas(b1, b2).weight_decay(wd));
  for (int s = 0; s < 5; ++s) {
    Tensor g = randn({n}, kFloat64) * (s % 2 ? -0.3 : 1.0);
    if (s == 2) g = zeros({n}, kFloat64);
    const std::vector<double> gv = g.to_vector<double>();
    p.set_grad(g);
    opt.step();
    for (size_t i = 0; i < size_t(n); ++i) {
      const double c = b1 * m[i] + (1 - b1) * gv[i];
      x[i] = x[i] * (1 - lr * wd) - lr * double((c > 0) - (c < 0));
      m[i] = b2 * m[i] + (1 - b2) * gv[i];
    }
  }
  CHECK(p.dtype() == kFloat64);
  const std::vector<double> got = p.to_vector<double>(),
                            mom = opt.state_dict().at("state.0.exp_avg").to_vector<double>();
  double worst = 0, worst_m = 0;
  for (size_t i = 0; i < size_t(n); ++i) {
    worst = std::max(worst, std::abs(got[i] - x[i]) / std::max(1.0, std::abs(x[i])));
    worst_m = std::max(worst_m, std::abs(mom[i] - m[i]) / std::max(1e-3, std::abs(m[i])));
  }
  CHECK(worst < 1e-14);
  CHECK(worst_m < 1e-14);
}

TEST_CASE("Lion: one moment per parameter, lazily, in the ledger; half of Adam's") {
  manual_seed(0);
  nn::Linear fc(100, 30);  // weight 12000 bytes (12288 in blocks), bias 120 (512)
  const int64_t before = memory_stats().category(Category::OptimizerState);
  optim::Lion opt(fc.named_parameters());
  fc.forward(randn({5, 100})).sum().backward();
  CHECK(opt.state_bytes() == 0);
  opt.step();
  const optim::StateReport r = opt.state_report();
  CHECK(r.state_bytes == r.param_bytes);
  CHECK(r.state_bytes == 12288 + 512);
  CHECK(memory_stats().category(Category::OptimizerState) - before == r.state_bytes);
  CHECK(r.rows[0].state.size() == 1);
  CHECK(r.rows[0].state[0].first == "exp_avg");
}

TEST_CASE("Lion: state_dict round trip continues bit for bit") {
  manual_seed(4);
  auto make = [](const Tensor& p) {
    return std::make_unique<optim::Lion>(std::vector<Tensor>{p}, optim::LionOptions(1e-2).weight_decay(0.1));
  };
  Tensor p = randn({300}).requires_grad_(), q = p.detach().clone().requires_grad_();
  auto a = make(p);
  std::vector<Tensor> grads;
  for (int s = 0; s < 6; ++s) grads.push_back(randn({300}));
  for (int s = 0; s < 3; ++s) p.set_grad(grads[size_t(s)]), a->step();
  const std::string path = "/tmp/mg_lion_state_" + std::to_string(::getpid()) + ".safetensors";
  nn::save_safetensors(a->state_dict(), path);
  {
    NoGradGuard ng;
    q.copy_(p);
  }
  auto b = make(q);
  b->load_state_dict(nn::load_safetensors(path));
  std::remove(path.c_str());
  CHECK(b->state_dict().at("state.0.step").item<int64_t>() == 3);
  for (int s = 3; s < 6; ++s) p.set_grad(grads[size_t(s)]), a->step(), q.set_grad(grads[size_t(s)]), b->step();
  CHECK(equal(p, q));
  for (auto& [k, t] : a->state_dict()) CHECK_MESSAGE(equal(t, b->state_dict().at(k)), k);
}

TEST_CASE("Lion: options out of range are refused") {
  Tensor p = ones({3}).requires_grad_();
  expect_error<ValueError>([&] { optim::Lion({p}, optim::LionOptions(-1)); }, {"Lion: expected lr >= 0"});
  expect_error<ValueError>([&] { optim::Lion({p}, optim::LionOptions().betas(1.5, 0.99)); },
                           {"Lion: expected betas in [0, 1], got 1.5 and 0.99"});
  expect_error<ValueError>([&] { optim::Lion({p}, optim::LionOptions().betas(0.9, -0.1)); }, {"betas in [0, 1]"});
  expect_error<ValueError>([&] { optim::Lion({p}, optim::LionOptions().weight_decay(-1)); },
                           {"Lion: expected weight_decay >= 0, got -1"});
  optim::Lion ok({p}, optim::LionOptions().betas(1, 1));  // the ends are lion-pytorch's too
  CHECK(ok.lr() == 1e-4);
}

TEST_CASE("Lion: its registry entry: one float32 moment, shards at every ZeRO stage") {
  const optim::OptimizerEntry& e = optim::optimizer_entry("lion");
  CHECK(e.type == "Lion");
  CHECK(e.state == optim::StateLayout::PerElement);
  CHECK(e.state_bytes(optim::OptimizerSpec("lion")) == 4);
  for (int stage = 0; stage <= 3; ++stage) CHECK(e.runs_sharded(stage));
  CHECK(e.block == 1);  // no quantization blocks: a ZeRO slice starts anywhere
  optim::OptimizerSpec spec("lion");
  spec.lr = 3e-4;
  auto opt = optim::make_optimizer(spec, {{"w", ones({2}).requires_grad_()}});
  CHECK(opt->type() == "Lion");
  CHECK(opt->lr() == 3e-4);
  CHECK(optim::entry_of(*opt) == &e);
}
