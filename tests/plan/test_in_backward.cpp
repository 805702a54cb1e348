// The optimizer step inside backward (optim::StepInBackward, StepOptions::step_in_backward): the
// same parameters, bit for bit, as the ordinary step for every optimizer, with clipping, the
// GradScaler (its two passes; a skipped step too), accumulation, half-precision storage and
// checkpoint segments; gradients freed as they are used (the Gradient peak is one tensor's bytes),
// and the plan on meta equal to the measured steps.
#include <doctest/doctest.h>

#include <memgrad/core/random.h>
#include <memgrad/memgrad.h>
#include <memgrad/plan/planner.h>

#include "expect_error.h"

using namespace mg;

namespace {

train::ModelSpec tiny_gpt(double dropout = 0.1) {
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.dropout = dropout;
  return train::ModelSpec::gpt_model(c);
}

// The parameters after `steps` training steps of `spec` on random data (the same each run).
std::vector<Tensor> run_training(const train::ModelSpec& spec, train::StepOptions o, const train::Policy& policy,
                                 int steps, bool in_backward) {
  o.step_in_backward = in_backward;
  manual_seed(3);
  train::ChainModel model(spec, kCPU);
  train::Trainer trainer(model.module(), o);
  for (int s = 0; s < steps; ++s) {
    manual_seed(100 + uint64_t(s));  // the data; the trainer's dropout draws from the same generator
    std::vector<std::pair<Tensor, Tensor>> batches;
    for (int64_t i = 0; i < o.accum; ++i)
      batches.emplace_back(randint(0, 64, {2, 16}, kInt64), randint(0, 64, {2, 16}, kInt64));
    train::train_step(
        model, trainer, [&](int64_t i) { return batches[size_t(i)]; }, policy);
    if (in_backward && o.accum == 1)
      for (auto& p : model.module().parameters()) CHECK_FALSE(p.grad().defined());
  }
  std::vector<Tensor> r;
  for (auto& p : model.module().parameters()) r.push_back(p.detach().clone());
  if (trainer.scaler()) r.push_back(scalar_tensor(trainer.scaler()->get_scale()));
  return r;
}

void check_same(const train::ModelSpec& spec, const train::StepOptions& o, const train::Policy& policy = {}) {
  const std::vector<Tensor> a = run_training(spec, o, policy, 3, false), b = run_training(spec, o, policy, 3, true);
  REQUIRE(a.size() == b.size());
  bool moved = false;
  for (size_t i = 0; i < a.size(); ++i) CHECK_MESSAGE(equal(a[i], b[i]), "tensor ", i);
  const std::vector<Tensor> before = run_training(spec, o, policy, 0, false);
  for (size_t i = 0; i < before.size(); ++i) moved |= !equal(a[i], before[i]);
  CHECK(moved);
}

}  // namespace

TEST_CASE("step in backward: the same parameters as the ordinary step, bit for bit") {
  for (const optim::OptimizerSpec& kind :
       std::vector<optim::OptimizerSpec>{optim::OptimizerSpec("sgd", 0.9), optim::OptimizerSpec("adamw"),
                                         optim::OptimizerSpec("adamw8bit"), optim::OptimizerSpec("adafactor")}) {
    CAPTURE(kind.label());
    train::StepOptions o;
    o.optimizer = kind;
    SUBCASE("plain") { check_same(tiny_gpt(), o); }
    SUBCASE("clipped: two passes") {
      o.clip_norm = 0.05;  // small enough to clip
      check_same(tiny_gpt(), o);
    }
    SUBCASE("accumulation") {
      o.accum = 3;
      check_same(tiny_gpt(), o);
    }
    SUBCASE("accumulation and clipping") {
      o.accum = 2, o.clip_norm = 0.05;
      check_same(tiny_gpt(), o);
    }
    SUBCASE("fp16 autocast with the GradScaler, clipped") {
      o.precision = train::Precision::Float16, o.grad_scaler = true, o.clip_norm = 0.05;
      check_same(tiny_gpt(), o);
    }
    SUBCASE("fp16 storage: float32 masters, the GradScaler") {
      o.precision = train::Precision::Float16Storage, o.grad_scaler = true;
      check_same(tiny_gpt(), o);
    }
    SUBCASE("bf16 storage, clipped") {
      o.precision = train::Precision::BFloat16Storage, o.clip_norm = 0.05;
      check_same(tiny_gpt(), o);
    }
    SUBCASE("checkpoint segments, clipped") {
      o.clip_norm = 0.05;
      check_same(tiny_gpt(), o, train::Policy::every_block(2));
    }
  }
}

TEST_CASE("step in backward: a step the GradScaler skips is skipped the same way") {
  train::StepOptions o;
  o.precision = train::Precision::Float16, o.grad_scaler = true;
  o.scaler.init_scale(3e38);  // the scaled loss overflows: the first steps are skipped
  const std::vector<Tensor> a = run_training(tiny_gpt(0), o, {}, 2, false),
                            b = run_training(tiny_gpt(0), o, {}, 2, true);
  for (size_t i = 0; i < a.size(); ++i) CHECK(equal(a[i], b[i]));
  CHECK(a.back().item<double>() < 3e38);  // it backed off
}

TEST_CASE("step in backward: the API steps each parameter and frees its gradient during backward") {
  manual_seed(1);
  nn::Linear a(8, 16), b(16, 4);
  std::vector<std::pair<std::string, Tensor>> params;
  for (auto& m : {&a, &b})
    for (auto& [n, p] : m->named_parameters()) params.emplace_back(n, p);
  std::vector<Tensor> copies;
  for (auto& [n, p] : params) copies.push_back(p.detach().clone().requires_grad_());
  Tensor x = randn({5, 8});
  // the ordinary step on the copies
  {
    optim::Adam opt(copies, optim::AdamOptions(0.1));
    Tensor h = relu(linear(x, copies[0], copies[1]));
    linear(h, copies[2], copies[3]).pow(2).mean().backward();
    opt.step();
  }
  optim::Adam opt(params, optim::AdamOptions(0.1));
  optim::StepInBackward in_backward(opt);
  int64_t most = 0;  // gradients alive at once, seen from the hooks
  optim::StepInBackward::Visit count = [&](size_t, const Tensor&) {
    int64_t alive = 0;
    for (auto& [n, p] : params) alive += p.grad().defined();
    most = std::max(most, alive);
  };
  in_backward.set_mode(optim::StepInBackward::Mode::Step, count);
  b.forward(relu(a.forward(x))).pow(2).mean().backward();
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK_FALSE(params[i].second.grad().defined());
    CHECK(equal(params[i].second, copies[i]));
  }
  CHECK(most == 1);
  expect_error<ValueError>([&] { in_backward.set_mode(optim::StepInBackward::Mode::Measure); }, {"Mode::Measure"});
  expect_error<ValueError>([&] { opt.step(ones({2}).requires_grad_()); }, {"one of the optimizer's parameters"});
}

TEST_CASE("step in backward: the Gradient peak is one gradient's bytes; the plan equals the measured steps") {
  // An MLP of 4 Linear(64, 64): the largest gradient is a weight's 16 KiB.
  const train::ModelSpec mlp = train::ModelSpec::mlp(4, 64);
  for (const optim::OptimizerSpec& kind :
       std::vector<optim::OptimizerSpec>{optim::OptimizerSpec("sgd"), optim::OptimizerSpec("adamw"),
                                         optim::OptimizerSpec("adamw8bit"), optim::OptimizerSpec("adafactor")}) {
    CAPTURE(kind.label());
    train::StepOptions o;
    o.optimizer = kind;
    o.step_in_backward = true;
    int64_t single_pass = 0;  // the peak without clipping
    for (double clip : {0.0, 1.0}) {
      o.clip_norm = clip;
      const plan::StepReport p = plan::plan(mlp, {8, 1}, o);
      // Clipping's two passes cost one gradient-sized temporary (its squares) over one pass: the
      // first pass's graph is gone before the second forward (its gradient accumulators, reused,
      // would run last and hold every gradient to the end: 4 weights' more).
      if (clip == 0) single_pass = p.peak;
      CHECK(p.peak <= single_pass + 64 * 64 * 4);
      CHECK(p.peak_of(Category::Gradient) == 64 * 64 * 4);
      plan::StepContext ctx = plan::context({8, 1});
      ctx.device = kCPU;
      plan::PlanOptions steps;
      steps.steps = p.steps;
      const plan::StepReport m = plan::measure(plan::program(mlp, {8, 1}, o), ctx, steps);
      CHECK(m.first_peak == p.first_peak);
      CHECK(m.peak == p.peak);
      CHECK(m.at_peak == p.at_peak);
      o.step_in_backward = false;
      const plan::StepReport ordinary = plan::plan(mlp, {8, 1}, o);
      CHECK(ordinary.peak_of(Category::Gradient) == 4 * (64 * 64 * 4 + 512));  // every weight and bias
      o.step_in_backward = true;
    }
  }
  // The tiny GPT: its tied embedding's gradient waits for the embedding's backward, so it is held
  // with the one other gradient in flight at a time.
  train::StepOptions o;
  o.step_in_backward = true;
  const plan::StepReport p = plan::plan(tiny_gpt(), {2, 16}, o);
  o.step_in_backward = false;
  const plan::StepReport q = plan::plan(tiny_gpt(), {2, 16}, o);
  CHECK(p.peak_of(Category::Gradient) < q.peak_of(Category::Gradient) / 2);
}

TEST_CASE("step in backward: refused with data parallelism, without an optimizer, and without a Trainer") {
  train::ChainModel model(tiny_gpt(), kCPU);
  train::StepOptions o;
  o.step_in_backward = true;
  o.world_size = 2;
  expect_error<ValueError>([&] { train::Trainer t(model.module(), o); }, {"step_in_backward", "data parallelism"});
  o.world_size = 1, o.optimizer = optim::OptimizerSpec::none();
  expect_error<ValueError>([&] { train::Trainer t(model.module(), o); }, {"step_in_backward needs an optimizer"});
  o.optimizer = optim::OptimizerSpec("adamw");
  auto opt = optim::make_optimizer(optim::OptimizerSpec("adamw"), model.module().named_parameters());
  expect_error<ValueError>(
      [&] {
        train::train_step(
            model, opt.get(), nullptr,
            [&](int64_t) {
              return model.zero_inputs({2, 16});
            },
            train::Policy::none(), o);
      },
      {"step_in_backward needs a train::Trainer"});
}
