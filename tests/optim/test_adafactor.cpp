// Adafactor against torch.optim.Adafactor (PyTorch 2.15; optim_adafactor.safetensors from
// tests/reference/make_optim_fixtures.py), the paper's first moment against a float64
// implementation written here, its factored state in the ledger, repeatable sums on any thread
// count, state_dict and the typed errors of bad options and state.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include <memgrad/memgrad.h>

#include "expect_error.h"

using namespace mg;

namespace {

const nn::StateDict& fixture(nn::Metadata* meta) {
  static nn::Metadata m;
  static nn::StateDict d = nn::load_safetensors(std::string(MG_FIXTURES_DIR) + "/optim_adafactor.safetensors", &m);
  *meta = m;
  return d;
}

optim::AdafactorOptions options_from(const nlohmann::json& o) {
  optim::AdafactorOptions r(o.value("lr", 1e-2));
  r.weight_decay(o.value("weight_decay", 0.0)).d(o.value("d", 1.0)).beta2_decay(o.value("beta2_decay", -0.8));
  r.maximize(o.value("maximize", false));
  if (o.contains("eps")) r.eps(o["eps"][0].is_null() ? -1.0 : o["eps"][0].get<double>(), o["eps"][1].get<double>());
  return r;
}

double max_rel(const Tensor& a, const Tensor& b, double floor) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(std::abs(y[i]), floor));
  return worst;
}

}  // namespace

TEST_CASE("Adafactor: matches torch.optim.Adafactor (factored, batched, vector, clipped, maximize, float64)") {
  nn::Metadata meta;
  const nn::StateDict& f = fixture(&meta);
  for (const char* name : {"matrix", "batched", "vector", "clipped", "maximize", "float64", "small_lr"}) {
    CAPTURE(name);
    const auto o = nlohmann::json::parse(meta.at(name));
    const std::string c = name;
    Tensor p = f.at(c + ".param").clone().requires_grad_();
    optim::Adafactor opt({p}, options_from(o));
    for (int s = 0; s < int(o.at("steps")); ++s) {
      p.set_grad(f.at(c + ".grads").select(0, s).clone());
      opt.step();
    }
    const double tol = p.dtype() == kFloat64 ? 1e-12 : 2e-6;
    CHECK(max_rel(p, f.at(c + ".final"), 1e-2) < tol);
    CHECK_FALSE(equal(p, f.at(c + ".param")));
    const auto state = opt.state_dict();
    for (const char* key : {"row_var", "col_var", "variance"}) {
      if (!f.count(c + ".state." + key)) {
        CHECK_FALSE(state.count(std::string("state.0.") + key));
        continue;
      }
      const Tensor want = f.at(c + ".state." + key);
      const Tensor got = state.at(std::string("state.0.") + key);
      CHECK(got.shape() == want.shape());
      CHECK(max_rel(got, want, 1e-6) < tol);
    }
  }
}

TEST_CASE("Adafactor: the first moment (beta1) follows a float64 implementation of the formulas") {
  manual_seed(9);
  const int64_t R = 5, C = 7;
  Tensor p = randn({R, C}).requires_grad_();
  std::vector<double> x = p.to_vector<double>(), r(R, 0), c(C, 0), m(R * C, 0);
  const double lr = 0.03, wd = 0.02, beta1 = 0.8, decay = -0.8, eps1 = 1e-30, eps2 = 1e-3, d = 1.0;
  optim::Adafactor opt({p}, optim::AdafactorOptions(lr).beta1(beta1).weight_decay(wd).eps(eps1, eps2));
  for (int t = 1; t <= 6; ++t) {
    Tensor g = randn({R, C});
    p.set_grad(g);
    opt.step();
    const std::vector<double> gv = g.to_vector<double>();
    const double w = std::pow(double(t), decay), rho = std::min(lr, 1 / std::sqrt(double(t)));
    double p2 = 0;
    for (double v : x) p2 += v * v;
    const double alpha = std::max(eps2, std::sqrt(p2 / double(R * C))) * rho;
    for (int64_t i = 0; i < R; ++i) {
      double s = 0;
      for (int64_t j = 0; j < C; ++j) s += gv[size_t(i * C + j)] * gv[size_t(i * C + j)];
      r[size_t(i)] += w * (s / double(C) - r[size_t(i)]);
    }
    for (int64_t j = 0; j < C; ++j) {
      double s = 0;
      for (int64_t i = 0; i < R; ++i) s += gv[size_t(i * C + j)] * gv[size_t(i * C + j)];
      c[size_t(j)] += w * (s / double(R) - c[size_t(j)]);
    }
    double mean = 0;
    for (double v : r) mean += v / double(R);
    std::vector<double> u(size_t(R * C));
    double u2 = 0;
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) {
        const double v = std::max(r[size_t(i)] * c[size_t(j)] / std::max(mean, eps1), eps1 * eps1);
        u[size_t(i * C + j)] = gv[size_t(i * C + j)] / std::sqrt(v);
        u2 += u[size_t(i * C + j)] * u[size_t(i * C + j)];
      }
    const double clip = std::max(1.0, std::sqrt(u2 / double(R * C)) / d);
    for (size_t e = 0; e < x.size(); ++e) {
      m[e] = beta1 * m[e] + (1 - beta1) * u[e] / clip;
      x[e] = x[e] * (1 - lr * wd) - alpha * m[e];
    }
  }
  CHECK(max_rel(p, tensor(x, {R, C}, kFloat64), 1e-2) < 1e-5);
  CHECK(max_rel(opt.state_dict().at("state.0.exp_avg"), tensor(m, {R, C}, kFloat64), 1e-3) < 1e-5);
}

TEST_CASE("Adafactor: factored state in the ledger, the report and on meta") {
  for (Device dev : {kCPU, kMeta}) {
    CAPTURE(dev);
    TensorOptions o = TensorOptions().device(dev);
    Tensor w = zeros({768, 3072}, o).requires_grad_(), b = zeros({3072}, o).requires_grad_();
    optim::Adafactor opt(std::vector<std::pair<std::string, Tensor>>{{"w", w}, {"b", b}},
                         optim::AdafactorOptions().beta1(0.9));
    w.set_grad(zeros({768, 3072}, o)), b.set_grad(zeros({3072}, o));
    const int64_t before = memory_stats(dev).category(Category::OptimizerState);
    opt.step();
    const optim::StateReport r = opt.state_report();
    // w: row_var [768, 1] (3072 B), col_var [1, 3072] (12288 B), exp_avg as w; b: variance and exp_avg
    const std::vector<std::pair<std::string, int64_t>> w_state = {
        {"row_var", 3072}, {"col_var", 12288}, {"exp_avg", 768 * 3072 * 4}};
    CHECK(r.rows[0].state == w_state);
    const std::vector<std::pair<std::string, int64_t>> b_state = {{"variance", 12288}, {"exp_avg", 12288}};
    CHECK(r.rows[1].state == b_state);
    CHECK(memory_stats(dev).category(Category::OptimizerState) - before == opt.state_bytes());
  }
  optim::Adafactor plain({zeros({768, 3072}).requires_grad_()});
  plain.param_groups()[0].params[0].set_grad(zeros({768, 3072}));
  plain.step();
  CHECK(plain.state_bytes() == 3072 + 12288);  // 0.0065 bytes of state per parameter byte
}

TEST_CASE("Adafactor: the same bits on one thread and on two") {
  auto run = [](int threads) {
    omp_set_num_threads(threads);
    manual_seed(12);
    Tensor p = randn({300, 200}).requires_grad_(), v = randn({70000}).requires_grad_();
    optim::Adafactor opt({p, v});
    for (int s = 0; s < 3; ++s) {
      p.set_grad(randn({300, 200})), v.set_grad(randn({70000}));
      opt.step();
    }
    return std::make_pair(p, v);
  };
  const int before = omp_get_max_threads();
  auto [p1, v1] = run(1);
  auto [p2, v2] = run(2);
  omp_set_num_threads(before);
  CHECK(equal(p1, p2));
  CHECK(equal(v1, v2));
}

TEST_CASE("Adafactor: options out of range and bad state are refused") {
  Tensor p = ones({4, 3}).requires_grad_();
  using O = optim::AdafactorOptions;
  expect_error<ValueError>([&] { optim::Adafactor({p}, O(-1)); }, {"Adafactor", "lr >= 0"});
  expect_error<ValueError>([&] { optim::Adafactor({p}, O().beta2_decay(0.5)); }, {"beta2_decay <= 0", "0.5"});
  expect_error<ValueError>([&] { optim::Adafactor({p}, O().eps(-0.5, 1e-3)); }, {"eps1 >= 0", "-1"});
  expect_error<ValueError>([&] { optim::Adafactor({p}, O().eps(-1, -1e-3)); }, {"eps2 >= 0"});
  expect_error<ValueError>([&] { optim::Adafactor({p}, O().d(0.5)); }, {"clipping threshold d >= 1", "0.5"});
  expect_error<ValueError>([&] { optim::Adafactor({p}, O().weight_decay(-1)); }, {"weight_decay >= 0"});
  expect_error<ValueError>([&] { optim::Adafactor({p}, O().beta1(1)); }, {"beta1 in [0, 1)"});

  optim::Adafactor opt({p});
  p.set_grad(ones({4, 3}));
  opt.step();
  optim::StateDict good = opt.state_dict();
  auto with = [&](const std::string& key, const Tensor& t) {
    optim::StateDict d = good;
    d[key] = t;
    return d;
  };
  optim::Adafactor other({ones({4, 3}).requires_grad_()});
  expect_error<ShapeError>(
      [&] {
        other.load_state_dict(with("state.0.row_var", zeros({1, 3})));
      },
      {"'state.0.row_var' expected shape [4, 1]", "one factor per row", "got [1, 3]"});
  expect_error<ValueError>(
      [&] {
        other.load_state_dict(with("state.0.col_var", full({1, 3}, -1.0)));
      },
      {"'state.0.col_var'", "finite second-moment factors >= 0", "-1"});
  expect_error<ValueError>([&] { other.load_state_dict(with("param_groups.0.d", scalar_tensor(0.0, kFloat64))); },
                           {"param_groups.0", "clipping threshold d >= 1"});
  expect_error<ValueError>(
      [&] {
        other.load_state_dict(with("state.0.variance", zeros({4, 3})));
      },
      {"keeps no state 'variance'"});
  other.load_state_dict(good);  // and the good one loads
  CHECK(other.state_bytes() == opt.state_bytes());
}
