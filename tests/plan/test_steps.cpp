// What a plan leaves behind and which step it describes: the default generator untouched, and
// StepOptions::steps = 2 giving the steady-state step that holds the optimizer state throughout.
#include <doctest/doctest.h>

#include <memgrad/core/random.h>
#include <memgrad/plan/planner.h>

using namespace mg;

namespace {
plan::ModelSpec tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.dropout = 0.1;
  return plan::ModelSpec::gpt_model(c);
}
}  // namespace

TEST_CASE("plan: planning does not move the default generator") {
  // Initialisation and dropout on meta reserve counters; a training loop that plans between steps
  // (memgrad train does) would otherwise draw different dropout masks after resuming.
  manual_seed(7);
  default_generator().set_offset(1000);
  plan::plan(tiny_gpt(), {2, 16});
  CHECK(default_generator().offset() == 1000);
  plan::measure_block_costs(tiny_gpt(), {2, 16});
  CHECK(default_generator().offset() == 1000);
  plan::choose_segments(tiny_gpt(), {2, 16}, {}, int64_t(1) << 30);
  CHECK(default_generator().offset() == 1000);
  CHECK(default_generator().seed() == 7);
}

TEST_CASE("plan: steps = 2 plans the steady state, equal to a second measured CPU step") {
  plan::StepOptions first, later;
  later.steps = 2;
  const plan::InputShape in{2, 16};
  const plan::StepReport p1 = plan::plan(tiny_gpt(), in, first), p2 = plan::plan(tiny_gpt(), in, later);
  // AdamW's two moments: 2 x the parameter bytes, held from the second step's start.
  CHECK(p2.category(Category::OptimizerState) == 2 * p2.category(Category::Parameter));
  CHECK(p2.peak > p1.peak);
  plan::StepRunner cpu(tiny_gpt(), in, first, kCPU);
  const plan::StepReport m1 = cpu.step(plan::Policy::none()), m2 = cpu.step(plan::Policy::none());
  CHECK(m1.peak == p1.peak);
  CHECK(m2.peak == p2.peak);
  CHECK(m2.at_peak == p2.at_peak);
  CHECK_THROWS_AS(plan::plan(tiny_gpt(), in, plan::StepOptions{plan::OptimizerKind::SGD, plan::Precision::Float32, 0}),
                  ValueError);
}

TEST_CASE("plan: accumulation, clipping and loss scaling planned on meta equal the CPU step to the byte") {
  // Micro-batches keep the gradients of the earlier ones alive; clip_grad_norm_ makes float64
  // temporaries; a GradScaler allocates its found-inf flag: meta must make them all. (A scale small
  // enough that no CPU step overflows: a skipped step would create no optimizer state, and meta
  // cannot know.)
  const plan::InputShape in{2, 16};
  for (auto precision : {plan::Precision::Float32}) {
    CAPTURE(int(precision));
    plan::StepOptions o;
    o.precision = precision, o.accum = 2, o.clip_norm = 0.5, o.grad_scaler = true;
    plan::StepRunner cpu(tiny_gpt(), in, o, kCPU), meta(tiny_gpt(), in, o, kMeta);
    for (int step = 0; step < 2; ++step) {
      const plan::StepReport c = cpu.step(plan::Policy::sqrt_n(2)), m = meta.step(plan::Policy::sqrt_n(2));
      CHECK(c.peak == m.peak);
      CHECK(c.at_peak == m.at_peak);
      CHECK(c.at_peak_by_owner == m.at_peak_by_owner);
    }
  }
  plan::StepOptions one, two;  // steady-state steps: their peak is in backward, not in the update
  one.steps = two.steps = 2, two.accum = 2;
  CHECK(plan::plan(tiny_gpt(), in, two).peak > plan::plan(tiny_gpt(), in, one).peak);  // gradients held across
}

TEST_CASE("plan: a ChainModel policy does not change the GPT's own selective-recompute setting") {
  plan::ChainModel chain(tiny_gpt(), kMeta);
  auto& gpt = dynamic_cast<nn::GPT&>(chain.module());
  auto [x, y] = chain.zero_inputs({2, 16});
  chain.loss(x, y, plan::Policy::selective_only());
  for (size_t i = 0; i < gpt.h->size(); ++i) CHECK_FALSE((*gpt.h)[i].attn->selective_recompute);
}
