// Optimizer validation as torch.optim does it: a parameter appears once, a parameter list is not
// empty, and every option is checked by one function whether it comes from the constructor, a
// parameter group or load_state_dict; a state dict's keys and steps are parsed strictly and a bad
// one raises mg::Error naming the key and changes nothing. A step that runs out of memory while
// creating state leaves the optimizer and the ledger as they were.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include <memgrad/memgrad.h>

#include "expect_error.h"

using namespace mg;
using optim::Hyperparameters;
using optim::ParamGroup;

namespace {

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<ParamGroup>)>;
const std::vector<std::pair<const char*, MakeOpt>> kOptimizers = {
    {"SGD", [](std::vector<ParamGroup> g) { return std::make_unique<optim::SGD>(std::move(g)); }},
    {"Adam", [](std::vector<ParamGroup> g) { return std::make_unique<optim::Adam>(std::move(g)); }},
    {"AdamW", [](std::vector<ParamGroup> g) { return std::make_unique<optim::AdamW>(std::move(g)); }},
};

Tensor param(int64_t n = 3) { return ones({n}).requires_grad_(); }

// Everything an optimizer holds, as plain numbers, to check that a failed call changed nothing.
std::map<std::string, std::vector<double>> contents(const optim::Optimizer& o) {
  std::map<std::string, std::vector<double>> r;
  for (auto& [k, t] : o.state_dict()) r[k] = t.to_vector<double>();
  return r;
}

}  // namespace

TEST_CASE("validation: a parameter listed twice, in one group or across groups, is refused") {
  for (auto& [name, make] : kOptimizers) {
    CAPTURE(name);
    Tensor p = param(), q = param();
    // SGD used to update p twice per step (p = -2 where -1 is right).
    expect_error<ValueError>([&] { make({ParamGroup{{p, q, p}, {}, {}}}); }, {name, "parameter 2", "more than once"});
    expect_error<ValueError>(
        [&] {
          make({ParamGroup{{p}, {}, {}}, ParamGroup{{q, p}, {}, {}}});
        },
        {name, "parameter 2", "more than once"});
    auto opt = make({ParamGroup{{p}, {"p"}, {}}});
    expect_error<ValueError>(
        [&] {
          opt->add_param_group(ParamGroup{{q, p}, {"q", "again"}, {}});
        },
        {"'again'", "more than once"});
    CHECK(opt->param_groups().size() == 1);  // the refused group was not added
  }
  // The case from the report: one SGD step with lr 1 and gradient 1 moves p from 0 to -1.
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD sgd({p}, optim::SGDOptions(1.0));
  p.set_grad(ones({1}));
  sgd.step();
  CHECK(p.item<float>() == -1);
}

TEST_CASE("validation: an empty parameter list or group is refused") {
  for (auto& [name, make] : kOptimizers) {
    CAPTURE(name);
    expect_error<ValueError>([&] { make({}); }, {name, "empty parameter list"});
    expect_error<ValueError>([&] { make({ParamGroup{}}); }, {name, "empty parameter list"});
    expect_error<ValueError>([&] { make({ParamGroup{{param()}, {}, {}}, ParamGroup{}}); }, {"empty parameter list"});
    auto opt = make({ParamGroup{{param()}, {}, {}}});
    expect_error<ValueError>([&] { opt->add_param_group(ParamGroup{}); }, {"empty parameter list"});
  }
  expect_error<ValueError>([] { optim::SGD(std::vector<Tensor>{}); }, {"SGD: got an empty parameter list"});
}

TEST_CASE("validation: every option is checked alike by the constructor, a group and load_state_dict") {
  // Each bad value, for each optimizer that has the option: refused as a group's option at
  // construction, by add_param_group and by load_state_dict (which then changes nothing).
  struct Bad {
    const char* option;
    double value;
    const char* message;
  };
  const std::vector<Bad> bad = {
      {"lr", -1, "lr >= 0"},
      {"lr", std::nan(""), "lr >= 0"},
      {"weight_decay", -0.5, "weight_decay >= 0"},
      {"maximize", 0.5, "maximize to be 0 or 1"},
      {"momentum", -1, "momentum and weight_decay >= 0"},
      {"nesterov", 2, "nesterov to be 0 or 1"},
      {"nesterov", 1, "Nesterov momentum requires"},  // with the default momentum 0
      {"beta1", 1, "betas in [0, 1)"},
      {"beta2", -0.1, "betas in [0, 1)"},
      {"beta2", std::nan(""), "betas in [0, 1)"},
      {"eps", -1e-8, "eps and weight_decay >= 0"},
      {"amsgrad", -1, "amsgrad to be 0 or 1"},
  };
  int checked = 0;
  for (auto& [name, make] : kOptimizers) {
    for (auto& b : bad) {
      Tensor p = param();
      auto good = make({ParamGroup{{p}, {}, {}}});
      if (!good->param_groups()[0].options.count(b.option)) continue;
      CAPTURE(name);
      CAPTURE(b.option);
      CAPTURE(b.value);
      expect_error<ValueError>([&] { make({ParamGroup{{param()}, {}, {{b.option, b.value}}}}); }, {b.message});
      expect_error<ValueError>(
          [&] {
            good->add_param_group(ParamGroup{{param()}, {}, {{b.option, b.value}}});
          },
          {b.message});
      // A real state first, so "changes nothing" has something to keep.
      (p * p).sum().backward();
      good->step();
      const auto before = contents(*good);
      auto dict = good->state_dict();
      dict[std::string("param_groups.0.") + b.option] = scalar_tensor(b.value, kFloat64);
      expect_error<ValueError>([&] { good->load_state_dict(dict); }, {"load_state_dict", "param_groups.0", b.message});
      CHECK(contents(*good) == before);
      ++checked;
    }
  }
  CHECK(checked == 7 + 9 + 9);  // every bad value that applies to SGD, Adam and AdamW
  // set_lr is held to the same check.
  Tensor p = param();
  optim::Adam adam({p});
  expect_error<ValueError>([&] { adam.set_lr(std::nan("")); }, {"Adam: expected lr >= 0, got nan"});
  CHECK(adam.lr() == 1e-3);
}

TEST_CASE("validation: state_dict keys and steps from an untrusted file") {
  Tensor p = param(), q = param(2);
  optim::Adam opt({p, q}, optim::AdamOptions(0.1));
  (p.sum() + q.sum()).backward();
  opt.step();
  const auto before = contents(opt);
  auto with = [&](const std::string& key, const Tensor& t) {
    auto d = opt.state_dict();
    d[key] = t;
    return d;
  };
  const Tensor one = scalar_tensor(int64_t(1), kInt64);
  // Indices: 10^25 used to escape as std::out_of_range from stoull.
  for (const char* key : {"state.10000000000000000000000000.step", "state.18446744073709551616.step", "state.01.step",
                          "state.+1.step", "state.-1.step", "state. 1.step", "state.1e3.step", "param_groups.x.lr"})
    expect_error<ValueError>([&] { opt.load_state_dict(with(key, one)); }, {"malformed key", key});
  expect_error<ValueError>([&] { opt.load_state_dict(with("state.18446744073709551615.step", one)); },
                           {"names parameter 18446744073709551615 but there are 2"});
  // Steps: whole numbers >= 0; a float of 1e30 used to be cast to int64 (undefined behaviour).
  expect_error<ValueError>([&] { opt.load_state_dict(with("state.0.step", scalar_tensor(int64_t(-7), kInt64))); },
                           {"'state.0.step'", "-7"});
  expect_error<ValueError>([&] { opt.load_state_dict(with("state.0.step", scalar_tensor(1e30, kFloat64))); },
                           {"'state.0.step'", "1e+30"});
  expect_error<ValueError>([&] { opt.load_state_dict(with("state.0.step", scalar_tensor(2.5, kFloat32))); },
                           {"'state.0.step'", "2.5"});
  expect_error<ValueError>([&] { opt.load_state_dict(with("state.0.step", scalar_tensor(NAN, kFloat32))); },
                           {"'state.0.step'", "nan"});
  // State tensors this optimizer does not keep (without amsgrad, or not Adam's at all).
  expect_error<ValueError>([&] { opt.load_state_dict(with("state.0.max_exp_avg_sq", zeros({3}))); },
                           {"'state.0.max_exp_avg_sq'", "keeps no state 'max_exp_avg_sq'"});
  expect_error<ValueError>([&] { opt.load_state_dict(with("state.1.momentum_buffer", zeros({2}))); },
                           {"'state.1.momentum_buffer'"});
  CHECK(contents(opt) == before);
  // A float step (as torch writes it) that is a whole number loads.
  opt.load_state_dict(with("state.0.step", scalar_tensor(4.0, kFloat32)));
  CHECK(opt.state_dict().at("state.0.step").item<int64_t>() == 4);
  // SGD keeps a momentum buffer only with momentum; the dict's own momentum decides.
  Tensor r = param();
  optim::SGD sgd({r});
  auto d = sgd.state_dict();
  d["state.0.momentum_buffer"] = zeros({3});
  expect_error<ValueError>([&] { sgd.load_state_dict(d); }, {"keeps no state 'momentum_buffer'"});
  d["param_groups.0.momentum"] = scalar_tensor(0.9, kFloat64);
  sgd.load_state_dict(d);
  CHECK(sgd.state_bytes() == 512);
}

TEST_CASE("validation: a step that runs out of memory creating its state changes nothing") {
  // Adam with amsgrad creates 3 state tensors for each of 3 parameters at its first step: fail
  // each of those 9 allocations in turn. The state used to be created parameter by parameter inside the
  // update, so a failure left the earlier parameters' state (and bytes) behind.
  manual_seed(3);
  std::vector<Tensor> ref_params, params;
  for (int64_t n : {5, 7, 3}) {
    ref_params.push_back(randn({n}).requires_grad_());
    params.push_back(ref_params.back().detach().clone().requires_grad_());
  }
  auto backward = [](const std::vector<Tensor>& ps) {
    ((ps[0] * ps[0]).sum() + ps[1].sum() + (ps[2] * 3.0).sum()).backward();
  };
  optim::Adam reference(ref_params, optim::AdamOptions(0.1).amsgrad());
  backward(ref_params);
  reference.step();

  optim::Adam opt(params, optim::AdamOptions(0.1).amsgrad());
  backward(params);
  const MemoryStats before = memory_stats(kCPU);
  const auto owners = memory_by_owner(kCPU);
  for (int64_t n = 1; n <= 9; ++n) {
    CAPTURE(n);
    memory::fail_allocation_after(n);
    CHECK_THROWS_AS(opt.step(), OutOfMemoryError);
    CHECK(memory::allocations_until_failure() == 0);
    CHECK(memory_stats(kCPU).allocated == before.allocated);
    CHECK(memory_stats(kCPU).by_category == before.by_category);
    CHECK(memory_by_owner(kCPU) == owners);
    CHECK(opt.state_dict().size() == 7);  // only the options: no state, no step
    CHECK(opt.state_bytes() == 0);
  }
  memory::fail_allocation_after(10);  // more than the step makes: it runs
  opt.step();
  memory::fail_allocation_after(0);
  for (size_t i = 0; i < params.size(); ++i) CHECK(equal(params[i], ref_params[i]));
  CHECK(contents(opt) == contents(reference));
}

TEST_CASE("validation: GradScaler.load_state_dict checks counts before casting them") {
  amp::GradScaler scaler;
  const auto good = scaler.state_dict();
  for (auto [key, value] : std::vector<std::pair<const char*, double>>{{"growth_interval", 1e30},
                                                                       {"growth_interval", std::nan("")},
                                                                       {"growth_interval", 0},
                                                                       {"growth_interval", 2.5},
                                                                       {"_growth_tracker", -1},
                                                                       {"_growth_tracker", 2000},
                                                                       {"_growth_tracker", 1e300}}) {
    CAPTURE(key);
    CAPTURE(value);
    auto bad = good;
    bad[key] = value;
    expect_error<ValueError>([&] { scaler.load_state_dict(bad); }, {"GradScaler", key});
    CHECK(scaler.state_dict() == good);
  }
  auto ok = good;
  ok["_growth_tracker"] = 1999;
  scaler.load_state_dict(ok);
  CHECK(scaler.growth_tracker() == 1999);
}
