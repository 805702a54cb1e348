// The multi-tensor path of the optimizers (one Backend call per parameter group): a group steps
// exactly as its parameters would one by one, with per-parameter step counts, dtypes and group
// options; on meta tensors a step books its state and touches no bytes.
#include <doctest/doctest.h>

#include <memory>

#include <memgrad/memgrad.h>

using namespace mg;

namespace {

std::unique_ptr<optim::Optimizer> make(int kind, std::vector<Tensor> params) {
  using namespace optim;
  switch (kind) {
    case 0:
      return std::make_unique<SGD>(params, SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01));
    case 1:
      return std::make_unique<SGD>(params, SGDOptions(0.05).momentum(0.9).nesterov().maximize());
    case 2:
      return std::make_unique<Adam>(params, AdamOptions(0.01).weight_decay(0.01).amsgrad());
    default:
      return std::make_unique<AdamW>(params, AdamWOptions(0.01));
  }
}

}  // namespace

TEST_CASE("a group's multi-tensor step equals stepping each parameter alone, bit for bit") {
  const std::vector<Shape> shapes = {{3}, {0}, {17, 5}, {40000}, {1}};
  const DType dtypes[] = {kFloat32, kFloat16, kFloat32, kBFloat16, kFloat64};
  for (int kind = 0; kind < 4; ++kind) {
    INFO("optimizer " << kind);
    manual_seed(3);
    std::vector<Tensor> together, alone;
    std::vector<std::unique_ptr<optim::Optimizer>> singles;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor init = randn(shapes[i]).to(dtypes[i]);
      together.push_back(init.clone().requires_grad_());
      alone.push_back(init.clone().requires_grad_());
      singles.push_back(make(kind, {alone.back()}));
    }
    auto group = make(kind, together);
    for (int step = 0; step < 4; ++step) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        bool skip = step == 0 && i == 2;  // parameter 2 lags one step behind the others
        Tensor g = skip ? Tensor() : randn(shapes[i]).to(dtypes[i]);
        together[i].set_grad(g.defined() ? g.clone() : g);
        alone[i].set_grad(g.defined() ? g.clone() : g);
        singles[i]->step();
      }
      group->step();
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      CHECK(together[i].to(kFloat64).to_vector<double>() == alone[i].to(kFloat64).to_vector<double>());
      auto a = group->state_dict(), b = singles[i]->state_dict();
      std::string prefix = "state." + std::to_string(i) + ".";
      CHECK(a.at(prefix + "step").item<int64_t>() == (i == 2 ? 3 : 4));
      for (auto& [key, t] : b)
        if (key.rfind("state.0.", 0) == 0)
          CHECK(a.at(prefix + key.substr(8)).to(kFloat64).to_vector<double>() == t.to(kFloat64).to_vector<double>());
    }
  }
}

TEST_CASE("optimizer steps on meta parameters book their state and compute nothing") {
  for (int kind = 0; kind < 4; ++kind) {
    std::vector<Tensor> params = {empty({300, 7}, kMeta).requires_grad_(), empty({9}, kMeta).requires_grad_()};
    auto opt = make(kind, params);
    const int64_t before = memory_stats(kMeta).category(Category::OptimizerState);
    for (int step = 0; step < 2; ++step) {
      for (auto& p : params) p.set_grad(empty(p.shape(), kMeta));
      CHECK_NOTHROW(opt->step());
    }
    const int64_t per_param = kind < 2 ? 1 : kind == 2 ? 3 : 2;  // momentum; exp_avg(+_sq)(+max)
    CHECK(opt->state_bytes() == per_param * (opt->state_report().param_bytes));
    CHECK(memory_stats(kMeta).category(Category::OptimizerState) - before == opt->state_bytes());
    CHECK(opt->state_dict().at("state.1.step").item<int64_t>() == 2);
  }
}
