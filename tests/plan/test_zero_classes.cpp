// ZeRO plans at any world size: the ranks of one class (the same slice or piece lengths) have the
// same plan, so the planner plans each class once; world sizes up to 2^20 plan, ranks whose shares
// are all padding included.
#include <doctest/doctest.h>

#include <memgrad/plan/fits.h>
#include <memgrad/plan/planner.h>
#include <memgrad/plan/zero.h>

using namespace mg;

namespace {
train::ModelSpec tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  return train::ModelSpec::gpt_model(c);
}
train::StepOptions zero(int stage, int64_t world, int64_t rank) {
  train::StepOptions o;
  o.zero_stage = stage, o.world_size = world, o.rank = rank, o.bucket_bytes = 8192;
  return o;
}
}  // namespace

TEST_CASE("ZeRO plans: the ranks of a class have the plan of its first rank") {
  plan::PlanOptions quick;
  quick.smallest_limit = false;
  for (int stage : {1, 2, 3}) {
    const int64_t world = 6;
    const auto classes = plan::rank_classes(tiny_gpt(), zero(stage, world, 0));
    CHECK(classes.size() > 1);  // the chunks cut the parameters differently
    for (const auto& c : classes) {
      const plan::StepReport first = plan::plan(tiny_gpt(), {2, 16}, zero(stage, world, c.first()), {}, quick);
      for (int64_t r = 0; r < world; ++r)
        if (c.contains(r)) {
          INFO("stage ", stage, ", rank ", r, " in the class of rank ", c.first());
          const plan::StepReport p = plan::plan(tiny_gpt(), {2, 16}, zero(stage, world, r), {}, quick);
          CHECK(p.peak == first.peak);
          CHECK(p.first_peak == first.first_peak);
          CHECK(p.reserved == first.reserved);
          CHECK(p.at_peak == first.at_peak);
        }
    }
  }
}

TEST_CASE("ZeRO plans: every world size plans, up to 2^20 ranks, those holding only padding included") {
  plan::PlanOptions quick;
  quick.smallest_limit = false;
  for (int64_t world : {int64_t(1), int64_t(7), int64_t(700), int64_t(100000), int64_t(1) << 20})
    for (int stage : {1, 2, 3}) {
      INFO(world, " ranks, stage ", stage);
      const auto classes = plan::rank_classes(tiny_gpt(), zero(stage, world, 0));
      CHECK(classes.size() <= 40);
      const plan::StepReport last = plan::plan(tiny_gpt(), {1, 16}, zero(stage, world, world - 1), {}, quick);
      CHECK_FALSE(last.out_of_memory);
      CHECK(last.peak > 0);
    }
}

TEST_CASE("what fits: the largest model of a family runs under the budget, the next one does not") {
  const train::InputShape in{1, 16};
  train::StepOptions step;
  step.zero_stage = 3, step.world_size = 4;
  const int64_t budget = int64_t(3) << 20;
  for (plan::Family family : {plan::Family::Layers, plan::Family::Width}) {
    const plan::LargestModel m = plan::largest_model(tiny_gpt(), family, in, step, budget, 64);
    REQUIRE(m.k >= 1);
    CHECK_FALSE(m.capped);
    const train::ModelSpec fits = plan::scaled(tiny_gpt(), family, m.k),
                           over = plan::scaled(tiny_gpt(), family, m.k + 1);
    CHECK(plan::fits(plan::program(fits, in, step), plan::context(in), budget));
    CHECK_FALSE(plan::fits(plan::program(over, in, step), plan::context(in), budget));
    CHECK(m.parameters == train::ChainModel(fits, kMeta).module().num_parameters());  // the count by formula
    // ZeRO's formula counts model states alone: never a smaller model than the plan.
    CHECK(plan::largest_by_formula(tiny_gpt(), family, step, budget).k >= m.k);
  }
}

TEST_CASE("what fits by ZeRO's formula: the largest depth by hand, and sizes past int64 never wrap") {
  // The tiny GPT with L blocks: (64 + 16) 32 + L (12 32^2 + 13 32) + 2 32 = 2624 + 12704 L parameters,
  // float32 AdamW: 16 bytes each at stage 0; on 4 ranks 4 + 4 + 8/4 = 10 (stage 1), 4 + 12/4 = 7
  // (stage 2), 16/4 = 4 (stage 3). Under 1 MiB: 2624 + 12704 L <= 65536, 104857.6, 149796.6, 262144.
  const int64_t expected[] = {4, 8, 11, 20};
  for (int stage = 0; stage <= 3; ++stage) {
    train::StepOptions step;
    step.zero_stage = stage, step.world_size = 4;
    const plan::LargestModel m = plan::largest_by_formula(tiny_gpt(), plan::Family::Layers, step, int64_t(1) << 20);
    CHECK(m.k == expected[stage]);
    CHECK(m.parameters == 2624 + 12704 * m.k);
    CHECK_FALSE(m.capped);
  }
  CHECK(plan::gpt_parameters(plan::scaled(tiny_gpt(), plan::Family::Width, 3).gpt) ==
        (64 + 16) * 48 + 2 * (12 * 48 * 48 + 13 * 48) + 2 * 48);  // 3 heads of 16: width 48
  // Counts past int64: a typed error, never a wrapped number; the formula's search stops below them.
  nn::GPTConfig huge = tiny_gpt().gpt;
  huge.n_embd = int64_t(1) << 40, huge.n_head = 1;
  CHECK_THROWS_AS(plan::gpt_parameters(huge), ValueError);
  CHECK_THROWS_AS(plan::scaled(train::ModelSpec::gpt_model(huge), plan::Family::Width, int64_t(1) << 30), ValueError);
  train::StepOptions step;
  step.zero_stage = 3, step.world_size = int64_t(1) << 20;
  const int64_t budget = int64_t(1) << 62;
  CHECK(plan::largest_by_formula(train::ModelSpec::gpt_model(huge), plan::Family::Width, step, budget).k == 0);
  nn::GPTConfig wide = tiny_gpt().gpt;
  wide.n_embd = int64_t(1) << 20, wide.n_head = 1;
  const plan::LargestModel deep =
      plan::largest_by_formula(train::ModelSpec::gpt_model(wide), plan::Family::Layers, step, budget);
  CHECK(deep.k >= 1);  // the deepest whose count fits in int64 (12 2^40 per block: about 700,000 blocks)
  CHECK(deep.parameters ==
        plan::gpt_parameters(plan::scaled(train::ModelSpec::gpt_model(wide), plan::Family::Layers, deep.k).gpt));
  CHECK_THROWS_AS(
      plan::gpt_parameters(plan::scaled(train::ModelSpec::gpt_model(wide), plan::Family::Layers, 2 * deep.k).gpt),
      ValueError);
}

TEST_CASE("ZeRO-3 plans: gradient shards kept from the build leave no hole in the cache (GPT-2 124M, 8 ranks)") {
  // Each step's gradient shards were made in backward, carved from a freed activation block, which
  // they pinned across the optimizer step: the next step's logits needed a segment of their own, and
  // the reserved peak was 12% above the allocated one (15206449152 B for 13552145408 B).
  nn::GPTConfig c;
  c.vocab_size = 50257, c.block_size = 1024, c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  plan::PlanOptions o;
  o.smallest_limit = false;
  const plan::StepReport r = plan::plan(train::ModelSpec::gpt_model(c), {8, 1024}, zero(3, 8, 0), {}, o);
  REQUIRE_FALSE(r.out_of_memory);
  INFO("allocated peak ", r.peak, " B, reserved ", r.reserved, " B");
  CHECK(double(r.reserved) <= 1.01 * double(r.peak));
}
