// A user's own model planned through the public API: a program that builds a residual ConvNet with
// BatchNorm on the device it is given and runs one training step. Plans equal the measured CPU steps,
// allocated and reserved; segments are chosen over its chain of blocks; the largest batch is found.
#include <doctest/doctest.h>

#include "../../examples/convnet.h"

using namespace mg;
using train::Policy;

namespace {
plan::StepReport measured(const plan::Program& program, plan::StepContext ctx, const plan::StepReport& planned) {
  ctx.device = kCPU;
  plan::PlanOptions o;
  o.steps = planned.steps;
  return plan::measure(program, ctx, o);
}
}  // namespace

TEST_CASE("plan: a user's residual ConvNet with BatchNorm, planned equals measured in fp32, bf16 and bf16 storage") {
  for (auto precision : {train::Precision::Float32, train::Precision::BFloat16, train::Precision::BFloat16Storage}) {
    const train::StepOptions step{optim::OptimizerSpec("adamw"), precision};
    const plan::Program program = convnet::program(8, 3, 8, step);
    for (const Policy& p : {Policy::none(), Policy::every_block(3), Policy::selective_only()}) {
      INFO(train::precision_name(precision), ", policy ", p.name);
      plan::StepContext ctx;
      ctx.batch = 4, ctx.policy = p;
      const plan::StepReport planned = plan::plan(program, ctx);
      const plan::StepReport cpu = measured(program, ctx, planned);
      CHECK(planned.steady);
      CHECK(planned.first_peak == cpu.first_peak);
      CHECK(planned.peak == cpu.peak);
      CHECK(planned.reserved == cpu.reserved);
      CHECK(planned.at_peak == cpu.at_peak);
      CHECK(planned.at_peak_by_owner == cpu.at_peak_by_owner);
      CHECK(planned.flops == cpu.flops);
      CHECK(planned.recompute_flops == cpu.recompute_flops);
      if (p.name == "every block") CHECK(planned.recompute_flops > 0);
    }
  }
}

TEST_CASE("plan: segments over a user's chain of blocks, and its largest batch") {
  const plan::Program program = convnet::program(8, 4, 8, {});
  plan::StepContext ctx;
  ctx.batch = 16;
  const plan::BlockCosts costs = plan::measure_block_costs(program, ctx);
  CHECK(costs.n == 4);
  CHECK(costs.held_bytes > 0);
  CHECK(costs.forward_flops == 2 * 2.0 * 16 * 8 * (8 * 9) * 64);  // two 3x3 convs of 8 channels on 8 x 8
  // The cost model's allocated peak is exact for this chain, for every segmentation tried.
  plan::PlanOptions peaks;
  peaks.smallest_limit = false;
  for (const Policy& p : {Policy::none(), Policy::sqrt_n(4), Policy::every_block(4), Policy::uniform(4, 3)}) {
    INFO(p.str());
    plan::StepContext c = ctx;
    c.policy = p;
    CHECK(plan::predicted_peak(costs, p) == plan::plan(program, c, peaks).peak);
  }
  plan::StepContext every = ctx;
  every.policy = Policy::every_block(4);
  const int64_t none = plan::plan(program, ctx).smallest_limit;
  const int64_t least = plan::plan(program, every).smallest_limit;
  REQUIRE(least < none);
  const int64_t budget = (least + none) / 2 / plan::kGranule * plan::kGranule;
  const auto rows = plan::choose_segments(program, ctx, budget);
  std::printf("%s", plan::choice_table(rows, budget).c_str());
  const auto best = plan::best_fit(rows);
  REQUIRE(best);
  CHECK(best->planned.reserved <= budget);
  every.policy = best->policy;
  CHECK(plan::fits(program, every, budget));
  const int64_t b = plan::largest_batch(program, ctx, none);
  CHECK(b >= 16);
  plan::StepContext more = ctx;
  more.batch = b + 1;
  CHECK_FALSE(plan::fits(program, more, none));
}

TEST_CASE("plan: a program that runs no chain cannot have segments chosen; one that fails is reported") {
  const plan::Program plain = [](const plan::StepContext& ctx) -> plan::Step {
    auto fc = std::make_shared<nn::Linear>(8, 8, true, TensorOptions(ctx.device));
    return [fc, ctx] { fc->forward(zeros({ctx.batch, 8}, ctx.device)).sum().backward(); };
  };
  CHECK_THROWS_WITH_AS(plan::measure_block_costs(plain, {}), doctest::Contains("run_chain"), ValueError);
  const plan::StepReport r = plan::plan(plain, {});
  CHECK(r.steady);
  CHECK(r.peak > 0);
  plan::PlanOptions tiny;
  tiny.memory_limit = 1024;
  const plan::StepReport oom = plan::plan(plain, {}, tiny);
  CHECK(oom.out_of_memory);
  CHECK(oom.oom_message.find("out of memory on meta") != std::string::npos);
  CHECK(memory_stats(kMeta).allocated == 0);
}
