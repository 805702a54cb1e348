// The planner's promise, on random configurations: for each, the plan equals the measured CPU steps
// to the byte, allocated and reserved; the steps run on the CPU under a memory limit of the planned
// reserved peak; one allocation granule less raises OutOfMemoryError. Seeded: MG_PROPERTY_SEED picks
// another seed, MG_PROPERTY_CASES another count; a failure prints the seed and the configuration.
#include <doctest/doctest.h>

#include <cstdlib>
#include <random>
#include <sstream>

#include "../../examples/convnet.h"

using namespace mg;
using train::Policy;

namespace {

struct Config {
  std::string text;  // what was drawn, for the failure message
  plan::Program program;
  plan::StepContext ctx;
};

template <class T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}
int64_t between(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

Config draw(std::mt19937_64& rng) {
  std::ostringstream os;
  train::StepOptions step;
  step.optimizer =
      pick(rng, std::vector<optim::OptimizerSpec>{optim::OptimizerSpec("sgd"), optim::OptimizerSpec("sgd", 0.9),
                                                  optim::OptimizerSpec("adam"), optim::OptimizerSpec("adamw")});
  step.precision = pick(rng, std::vector<train::Precision>{train::Precision::Float32, train::Precision::Float16,
                                                           train::Precision::BFloat16, train::Precision::Float16Storage,
                                                           train::Precision::BFloat16Storage});
  step.accum = between(rng, 1, 3);
  step.clip_norm = pick(rng, std::vector<double>{0.0, 0.5});
  // Loss scaling for every float16 mode and now and then elsewhere; a small first scale, so that no
  // CPU step overflows and is skipped (a plan assumes every step is taken).
  step.grad_scaler = step.precision == train::Precision::Float16 ||
                     step.precision == train::Precision::Float16Storage || between(rng, 0, 3) == 0;
  step.scaler.init_scale(8.0);
  os << "optimizer " << step.optimizer.label() << ", " << train::precision_name(step.precision) << ", accum "
     << step.accum << ", clip " << step.clip_norm << (step.grad_scaler ? ", scaler" : "");
  Config c;
  c.ctx.batch = between(rng, 1, 5);
  int64_t n = 0;
  switch (between(rng, 0, 2)) {
    case 0: {
      n = between(rng, 2, 5);
      const int64_t width = pick(rng, std::vector<int64_t>{16, 24, 40, 64});
      os << "; MLP " << n << " x " << width;
      c.program = plan::program(train::ModelSpec::mlp(n, width), {1, 1}, step);
      break;
    }
    case 1: {
      nn::GPTConfig g;
      n = g.n_layer = between(rng, 1, 3);
      g.n_head = between(rng, 1, 2);
      g.n_embd = 16 * between(rng, 1, 2);
      g.vocab_size = pick(rng, std::vector<int64_t>{48, 100});
      g.block_size = pick(rng, std::vector<int64_t>{8, 12, 16});
      g.dropout = pick(rng, std::vector<double>{0.0, 0.1});
      g.fused_attention = between(rng, 0, 1) == 1;
      os << "; GPT n_layer " << g.n_layer << " n_head " << g.n_head << " n_embd " << g.n_embd << " vocab "
         << g.vocab_size << " seq " << g.block_size << " dropout " << g.dropout
         << (g.fused_attention ? " fused" : " composed");
      c.program = plan::program(train::ModelSpec::gpt_model(g), {1, g.block_size}, step);
      break;
    }
    default: {
      n = between(rng, 1, 3);
      const int64_t channels = pick(rng, std::vector<int64_t>{4, 8}), size = pick(rng, std::vector<int64_t>{4, 6});
      os << "; residual ConvNet with BatchNorm, " << n << " blocks of " << channels << " channels, " << size << " x "
         << size;
      c.program = convnet::program(channels, n, size, step);
    }
  }
  switch (between(rng, 0, 5)) {
    case 0:
      c.ctx.policy = Policy::none();
      break;
    case 1:
      c.ctx.policy = Policy::sqrt_n(n);
      break;
    case 2:
      c.ctx.policy = Policy::selective_only();
      break;
    case 3:
      c.ctx.policy = Policy::every_block(n);
      break;
    case 4:
      c.ctx.policy = Policy::uniform(n, between(rng, 1, n));
      break;
    default: {  // --checkpoint auto for a budget between what every block and no checkpointing need
      plan::StepContext every = c.ctx;
      every.policy = Policy::every_block(n);
      const int64_t lo = plan::plan(c.program, every).smallest_limit, hi = plan::plan(c.program, c.ctx).smallest_limit;
      const int64_t budget = std::max(lo, hi) - (std::max(lo, hi) - std::min(lo, hi)) / 3 / 512 * 512;
      const auto best = plan::best_fit(plan::choose_segments(c.program, c.ctx, budget));
      c.ctx.policy = best ? best->policy : Policy::every_block(n);
      os << "; auto for " << budget << " B";
    }
  }
  os << "; batch " << c.ctx.batch << "; policy " << c.ctx.policy.name << " " << c.ctx.policy.str();
  c.text = os.str();
  return c;
}

plan::StepReport on_cpu(const Config& c, int64_t limit, int64_t steps) {
  plan::StepContext ctx = c.ctx;
  ctx.device = kCPU;
  plan::PlanOptions o;
  o.memory_limit = limit, o.steps = steps;
  return plan::measure(c.program, ctx, o);
}

}  // namespace

TEST_CASE(
    "plan: the promise on random configurations: planned == measured, a limit of the reserved peak runs, "
    "one granule less does not") {
  const char* seed_env = std::getenv("MG_PROPERTY_SEED");
  const char* cases_env = std::getenv("MG_PROPERTY_CASES");
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 20240611;
  const int cases = cases_env ? std::atoi(cases_env) : 32;
  std::printf("plan property test: seed %llu (MG_PROPERTY_SEED), %d configurations\n",
              static_cast<unsigned long long>(seed), cases);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < cases; ++i) {
    const Config c = draw(rng);
    INFO("seed ", seed, ", configuration ", i, ": ", c.text);
    const plan::StepReport planned = plan::plan(c.program, c.ctx);
    REQUIRE_FALSE(planned.out_of_memory);
    CHECK(planned.steady);
    const plan::StepReport cpu = on_cpu(c, 0, planned.steps);
    CHECK(cpu.first_peak == planned.first_peak);
    CHECK(cpu.peak == planned.peak);
    CHECK(cpu.reserved == planned.reserved);
    CHECK(cpu.at_peak == planned.at_peak);
    // Under a limit the allocator returns cached segments and falls back to smaller ones, so the steps
    // may take another number of steps to settle: as many as the plan's search allowed.
    const plan::StepReport at = on_cpu(c, planned.smallest_limit, 0);
    CHECK_FALSE(at.out_of_memory);
    CHECK(at.reserved == planned.smallest_limit);
    const plan::StepReport below = on_cpu(c, planned.smallest_limit - plan::kGranule, 0);
    CHECK(below.out_of_memory);
    CHECK(below.steps == planned.below_limit_fails_at);
  }
}
