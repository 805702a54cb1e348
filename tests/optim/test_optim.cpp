// Optimizers against torch.optim (20 steps, fixtures from tests/reference/make_nn_fixtures.py),
// state accounting against the ledger, state_dict, clipping, schedulers, gradient accumulation.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <memory>

#include <memgrad/memgrad.h>

using namespace mg;

namespace {
const nn::StateDict& fixture() {
  static nn::StateDict d = nn::load_safetensors(std::string(MG_FIXTURES_DIR) + "/nn_optim.safetensors");
  return d;
}

std::unique_ptr<optim::Optimizer> make(const std::string& name, const std::vector<Tensor>& params) {
  using namespace optim;
  if (name == "sgd") return std::make_unique<SGD>(params, SGDOptions(0.1));
  if (name == "sgd_momentum")
    return std::make_unique<SGD>(params, SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01));
  if (name == "sgd_nesterov")
    return std::make_unique<SGD>(params, SGDOptions(0.05).momentum(0.9).nesterov().weight_decay(0.01));
  if (name == "adam") return std::make_unique<Adam>(params, AdamOptions(0.01));
  if (name == "adam_amsgrad")
    return std::make_unique<Adam>(params, AdamOptions(0.01).betas(0.8, 0.95).weight_decay(0.01).amsgrad());
  if (name == "adamw") return std::make_unique<AdamW>(params, AdamWOptions(0.01).weight_decay(0.1));
  FAIL("unknown config " << name);
  return nullptr;
}

// Largest relative error |a - b| / |b| (elements below 1e-3 measured against 1e-3).
double rel_error(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(std::abs(y[i]), 1e-3));
  return worst;
}

int64_t state_ledger() { return memory_stats().category(Category::OptimizerState); }
}  // namespace

TEST_CASE("optimizers match torch.optim over 20 steps to 1e-6 relative") {
  for (std::string name : {"sgd", "sgd_momentum", "sgd_nesterov", "adam", "adam_amsgrad", "adamw"}) {
    INFO(name);
    std::vector<Tensor> params;
    for (int k = 0; k < 2; ++k) params.push_back(fixture().at("init." + std::to_string(k)).clone().requires_grad_());
    auto opt = make(name, params);
    for (int s = 0; s < 20; ++s) {
      for (int k = 0; k < 2; ++k)
        params[size_t(k)].set_grad(fixture().at("grad." + std::to_string(s) + "." + std::to_string(k)).clone());
      opt->step();
    }
    for (int k = 0; k < 2; ++k) {
      Tensor want = fixture().at("final." + name + "." + std::to_string(k));
      CHECK(rel_error(params[size_t(k)], want) < 1e-6);
      CHECK_FALSE(allclose(params[size_t(k)], fixture().at("init." + std::to_string(k))));  // it moved
    }
  }
}

TEST_CASE("optimizer state: lazy, per parameter, and equal to the ledger's OptimizerState bytes") {
  struct Case {
    const char* name;
    int64_t multiple;
    std::vector<std::string> keys;
  };
  for (const Case& c : {Case{"sgd", 0, {}}, Case{"sgd_momentum", 1, {"momentum_buffer"}},
                        Case{"adam", 2, {"exp_avg", "exp_avg_sq"}}, Case{"adamw", 2, {"exp_avg", "exp_avg_sq"}},
                        Case{"adam_amsgrad", 3, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}}}) {
    INFO(std::string(c.name));
    manual_seed(0);
    nn::Sequential model;
    model.emplace_back<nn::Linear>(100, 30);  // weight 12000 bytes (12288 in blocks), bias 120 (512)
    model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::Linear>(30, 7);
    auto opt = make(c.name, model.parameters());
    int64_t before = state_ledger();
    model(randn({5, 100})).sum().backward();
    CHECK(opt->state_bytes() == 0);  // nothing before the first step
    CHECK(state_ledger() == before);
    opt->step();
    auto report = opt->state_report();
    CHECK(report.param_bytes == 12288 + 512 + 1024 + 512);
    CHECK(report.grad_bytes == report.param_bytes);
    CHECK(report.state_bytes == c.multiple * report.param_bytes);
    CHECK(opt->state_bytes() == report.state_bytes);
    CHECK(state_ledger() - before == report.state_bytes);  // the jump at the first step
    CHECK(report.state_per_param() == doctest::Approx(double(c.multiple)));
    REQUIRE(report.rows.size() == 4);
    CHECK(report.rows[0].name == "0.weight");
    CHECK(report.rows[0].shape == Shape{30, 100});
    CHECK(opt->state_bytes(model.parameters()[0]) == c.multiple * 12288);
    std::vector<std::string> keys;
    for (auto& [k, b] : report.rows[0].state) {
      keys.push_back(k);
      CHECK(b == 12288);
    }
    CHECK(keys == c.keys);
    // The ledger labels state with the parameter's name.
    if (c.multiple > 0) CHECK(memory_by_owner().at("2.bias") == 512 + c.multiple * 512);
    std::string table = report.str();
    CHECK(table.find("0.weight") != std::string::npos);
    CHECK(table.find("[30, 100]") != std::string::npos);
    opt->step();  // no new state at later steps
    CHECK(state_ledger() - before == report.state_bytes);
    opt.reset();
    CHECK(state_ledger() == before);  // freed with the optimizer
  }
}

TEST_CASE("zero_grad sets gradients to none by default, or zeroes them") {
  Tensor p = ones({3}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  (p * 2.0).sum().backward();
  opt.zero_grad(false);
  REQUIRE(p.grad().defined());
  CHECK(p.grad().to_vector<float>() == std::vector<float>{0, 0, 0});
  opt.zero_grad();
  CHECK_FALSE(p.grad().defined());
  opt.step();  // parameters without gradients are skipped
  CHECK(p.to_vector<float>() == std::vector<float>{1, 1, 1});
}

TEST_CASE("parameter groups have their own options; state_dict round-trips through safetensors") {
  manual_seed(1);
  Tensor a = randn({4}).requires_grad_(), b = randn({2, 2}).requires_grad_();
  Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  auto groups = [](Tensor x, Tensor y) {
    return std::vector<optim::ParamGroup>{{{x}, {"a"}, {}}, {{y}, {"b"}, {{"lr", 0.5}, {"weight_decay", 0.1}}}};
  };
  optim::Adam opt(groups(a, b), optim::AdamOptions(0.1).amsgrad());
  CHECK(opt.lr(0) == 0.1);
  CHECK(opt.lr(1) == 0.5);
  auto run = [](optim::Optimizer& o, Tensor x, Tensor y, int steps) {
    for (int s = 0; s < steps; ++s) {
      o.zero_grad();
      ((x * x).sum() + (y * y * y).sum()).backward();
      o.step();
    }
  };
  run(opt, a, b, 3);
  std::string path = "/tmp/mg_optim_state_" + std::to_string(::getpid()) + ".safetensors";
  nn::save_safetensors(opt.state_dict(), path);
  CHECK(opt.state_dict().at("state.1.step").item<int64_t>() == 3);

  optim::Adam other(groups(a2, b2), optim::AdamOptions(0.1).amsgrad());
  {
    NoGradGuard ng;
    a2.copy_(a), b2.copy_(b);
  }
  int64_t before = state_ledger();
  other.load_state_dict(nn::load_safetensors(path));
  CHECK(state_ledger() - before == other.state_bytes());
  CHECK(other.lr(1) == 0.5);
  run(opt, a, b, 2);
  run(other, a2, b2, 2);
  CHECK(equal(a, a2));
  CHECK(equal(b, b2));
  // Bad dicts raise and change nothing.
  auto bad = opt.state_dict();
  bad["state.0.exp_avg"] = zeros({5});
  CHECK_THROWS_AS(other.load_state_dict(bad), ShapeError);
  bad = opt.state_dict();
  bad["state.7.exp_avg"] = zeros({4});
  CHECK_THROWS_AS(other.load_state_dict(bad), ValueError);
  CHECK(other.state_dict().at("state.0.step").item<int64_t>() == 5);
  std::remove(path.c_str());
}

TEST_CASE("clip_grad_norm_ and clip_grad_value_") {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({1}).requires_grad_(), c = zeros({1}).requires_grad_();
  a.set_grad(tensor(std::vector<float>{3, 0}));
  b.set_grad(tensor(std::vector<float>{4}, {1}));
  double total = optim::clip_grad_norm_({a, b, c}, 1.0);  // c has no gradient
  CHECK(total == doctest::Approx(5.0));
  CHECK(a.grad().to_vector<double>()[0] == doctest::Approx(3.0 / (5.0 + 1e-6)).epsilon(1e-6));
  CHECK(b.grad().to_vector<double>()[0] == doctest::Approx(4.0 / (5.0 + 1e-6)).epsilon(1e-6));
  CHECK(optim::clip_grad_norm_({a, b}, 10.0) == doctest::Approx(1.0).epsilon(1e-5));  // under the cap: unchanged
  CHECK(b.grad().to_vector<double>()[0] == doctest::Approx(0.8).epsilon(1e-5));
  b.set_grad(tensor(std::vector<float>{-7}, {1}));
  CHECK(optim::clip_grad_norm_({a, b}, 1.0, optim::kInfNorm) == doctest::Approx(7.0));
  CHECK(b.grad().to_vector<double>()[0] == doctest::Approx(-7.0 / (7.0 + 1e-6)).epsilon(1e-6));
  a.set_grad(tensor(std::vector<float>{3, -0.25f}));
  optim::clip_grad_value_({a}, 0.5);
  CHECK(a.grad().to_vector<float>() == std::vector<float>{0.5f, -0.25f});
}

TEST_CASE("LR schedulers follow their formulas") {
  Tensor p = zeros({1}).requires_grad_();
  SUBCASE("step") {
    optim::SGD opt({p}, optim::SGDOptions(1.0));
    optim::StepLR s(opt, 3, 0.5);
    std::vector<double> got;
    for (int t = 0; t < 7; ++t, s.step()) got.push_back(opt.lr());
    CHECK(got == std::vector<double>{1, 1, 1, 0.5, 0.5, 0.5, 0.25});
  }
  SUBCASE("linear warmup") {
    optim::SGD opt({p}, optim::SGDOptions(0.8));
    optim::LinearWarmupLR s(opt, 4);
    std::vector<double> got;
    for (int t = 0; t < 6; ++t, s.step()) got.push_back(opt.lr());
    CHECK(got == std::vector<double>{0.2, 0.4, 0.6000000000000001, 0.8, 0.8, 0.8});
  }
  SUBCASE("warmup then cosine") {
    optim::AdamW opt({p}, optim::AdamWOptions(1.0));
    optim::WarmupCosineLR s(opt, 2, 10, 0.1);
    std::vector<double> got;
    for (int t = 0; t < 12; ++t, s.step()) got.push_back(opt.lr());
    CHECK(got[0] == doctest::Approx(0.5));
    CHECK(got[1] == doctest::Approx(1.0));
    CHECK(got[2] == doctest::Approx(1.0));   // cosine starts at the top
    CHECK(got[6] == doctest::Approx(0.55));  // halfway: (1 + 0.1) / 2
    CHECK(got[4] == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4))));
    CHECK(got[10] == doctest::Approx(0.1));
    CHECK(got[11] == doctest::Approx(0.1));
  }
}

TEST_CASE("gradient accumulation: K micro-batches of loss/K equal one batch K times larger") {
  manual_seed(7);
  nn::Sequential model;
  model.emplace_back<nn::Linear>(6, 16);
  model.emplace_back<nn::GELU>();
  model.emplace_back<nn::Linear>(16, 3);
  Tensor x = randn({12, 6}), y = randint(0, 3, {12});
  nn::CrossEntropyLoss ce;
  ce(model(x), y).backward();
  std::vector<Tensor> full;
  for (auto& p : model.parameters()) full.push_back(p.grad().clone());
  model.zero_grad();
  const int64_t K = 4;
  for (int64_t k = 0; k < K; ++k) (ce(model(x.narrow(0, 3 * k, 3)), y.narrow(0, 3 * k, 3)) / double(K)).backward();
  auto params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(allclose(params[i].grad(), full[i], 1e-5, 1e-7));
}

TEST_CASE("clip_grad_norm_ needs one gradient-sized temporary, not float64 copies") {
  Tensor w = zeros({256, 1024}).requires_grad_();  // 1 MiB of float32
  w.set_grad(full({256, 1024}, 0.01));
  const int64_t grad_bytes = 256 * 1024 * 4;
  for (double norm_type : {2.0, optim::kInfNorm}) {
    CAPTURE(norm_type);
    reset_peak();
    const int64_t before = memory_stats().allocated;
    const double total = optim::clip_grad_norm_({w}, 1e9, norm_type);
    CHECK(total == doctest::Approx(norm_type == 2.0 ? 0.01 * 512.0 : 0.01).epsilon(1e-5));
    CHECK(memory_stats().peak_allocated - before <= grad_bytes + 4096);  // was 4x: x.to(float64), then |x|^p
  }
}
