// ZeRO plans at any world size: the ranks of one class (the same slice or piece lengths) have the
// same plan, so the planner plans each class once; world sizes up to 2^20 plan, ranks whose shares
// are all padding included.
#include <doctest/doctest.h>

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
