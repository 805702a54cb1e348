// What a plan leaves behind and which step it describes: the default generator untouched, and
// StepOptions::steps = 2 giving the steady-state step that holds the optimizer state throughout.
#include <doctest/doctest.h>

#include <vector>

#include <memgrad/core/random.h>
#include <memgrad/plan/planner.h>

using namespace mg;

namespace {
train::ModelSpec tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.dropout = 0.1;
  return train::ModelSpec::gpt_model(c);
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

TEST_CASE("plan: a plan runs to the steady state, equal to the measured CPU steps") {
  const train::InputShape in{2, 16};
  plan::PlanOptions two;
  two.steps = 2, two.smallest_limit = false;
  const plan::StepReport steady = plan::plan(tiny_gpt(), in), p2 = plan::plan(tiny_gpt(), in, {}, {}, two);
  CHECK(steady.steady);
  CHECK(steady.steps >= 2);
  // AdamW's two moments: 2 x the parameter bytes, held from the second step's start.
  CHECK(p2.category(Category::OptimizerState) == 2 * p2.category(Category::Parameter));
  CHECK(p2.peak > p2.first_peak);
  CHECK(steady.peak == p2.peak);  // every step after the first allocates the same
  CHECK(steady.first_peak == p2.first_peak);
  plan::StepRunner cpu(tiny_gpt(), in, {}, kCPU);
  const plan::StepReport m1 = cpu.step(train::Policy::none()), m2 = cpu.step(train::Policy::none());
  CHECK(m1.peak == p2.first_peak);
  CHECK(m2.peak == p2.peak);
  CHECK(m2.at_peak == p2.at_peak);
  plan::PlanOptions bad;
  bad.steps = -1;
  CHECK_THROWS_AS(plan::plan(tiny_gpt(), in, {}, {}, bad), ValueError);
  bad = {};
  bad.device = DeviceType::Meta;
  CHECK_THROWS_AS(plan::plan(tiny_gpt(), in, {}, {}, bad), ValueError);
}

TEST_CASE("plan: the reserved peak is the smallest memory limit the steps run under, to the granule") {
  // The steps run on the CPU under a limit of exactly the planned reserved peak, and one granule less
  // raises OutOfMemoryError. Without a limit the cache grows further (segments of 2 and 20 MiB).
  const train::InputShape in{4, 16};
  const plan::StepReport p = plan::plan(tiny_gpt(), in);
  REQUIRE(p.smallest_limit > 0);
  CHECK(p.smallest_limit % plan::kGranule == 0);
  CHECK(p.smallest_limit >= p.peak);
  CHECK(p.smallest_limit <= p.reserved);
  plan::StepContext ctx = plan::context(in);
  ctx.device = kCPU;
  plan::PlanOptions o;
  o.steps = p.steps;
  const auto program = plan::program(tiny_gpt(), in, {});
  CHECK(plan::measure(program, ctx, o).reserved == p.reserved);
  o.memory_limit = p.smallest_limit;
  const plan::StepReport at = plan::measure(program, ctx, o);
  CHECK_FALSE(at.out_of_memory);
  CHECK(at.reserved == p.smallest_limit);
  o.memory_limit = p.smallest_limit - plan::kGranule;
  const plan::StepReport below = plan::measure(program, ctx, o);
  CHECK(below.out_of_memory);
  CHECK(below.oom_message.find("out of memory") != std::string::npos);
  CHECK(memory_stats(kCPU).allocated == 0);  // nothing left behind by the failed steps (fresh allocators)
}

TEST_CASE("plan: the smallest limit found by replaying the recorded requests is the one rerunning finds") {
  // The search serves the first run's allocation trace again under each limit it tries; rerunning the
  // program at each limit (the old search) must find the same limit and the same failing step.
  struct Case {
    const char* what;
    train::StepOptions step;
    train::Policy policy;
    train::InputShape input;
  };
  std::vector<Case> cases;
  cases.push_back({"fp32", {}, train::Policy::none(), {4, 16}});
  train::StepOptions half;
  half.precision = train::Precision::Float16Storage, half.grad_scaler = true, half.clip_norm = 1.0, half.accum = 2;
  cases.push_back({"fp16-storage, scaler, clipping, accumulation", half, train::Policy::every_block(2), {2, 16}});
  train::StepOptions zero3;
  zero3.world_size = 3, zero3.rank = 2, zero3.zero_stage = 3;
  cases.push_back({"ZeRO-3, rank 2 of 3", zero3, train::Policy::sqrt_n(2), {2, 16}});
  train::StepOptions zero2;
  zero2.world_size = 4, zero2.rank = 1, zero2.zero_stage = 2, zero2.bucket_bytes = 4096;
  cases.push_back({"ZeRO-2, rank 1 of 4", zero2, train::Policy::none(), {2, 16}});
  for (const Case& c : cases) {
    INFO(c.what);
    plan::PlanOptions rerun;
    rerun.replay_search = false;
    const plan::StepReport a = plan::plan(tiny_gpt(), c.input, c.step, c.policy);
    const plan::StepReport b = plan::plan(tiny_gpt(), c.input, c.step, c.policy, rerun);
    CHECK(a.smallest_limit == b.smallest_limit);
    CHECK(a.below_limit_fails_at == b.below_limit_fails_at);
    CHECK(a.reserved == b.reserved);
    CHECK(a.peak == b.peak);
  }
}

TEST_CASE("plan: accumulation, clipping and loss scaling planned on meta equal the CPU steps to the byte") {
  // Micro-batches keep the gradients of the earlier ones alive; clip_grad_norm_ makes temporaries;
  // a GradScaler allocates its found-inf flag: meta must make them all. (A scale small enough that
  // no CPU step overflows: a skipped step would create no optimizer state, and meta cannot know.)
  const train::InputShape in{2, 16};
  for (auto precision : {train::Precision::Float32, train::Precision::Float16, train::Precision::Float16Storage}) {
    CAPTURE(train::precision_name(precision));
    train::StepOptions o;
    o.precision = precision, o.accum = 2, o.clip_norm = 0.5, o.grad_scaler = true;
    o.scaler.init_scale(4.0);
    const auto program = plan::program(tiny_gpt(), in, o);
    plan::PlanOptions peaks;
    peaks.smallest_limit = false;
    const plan::StepReport m = plan::plan(program, plan::context(in, train::Policy::sqrt_n(2)), peaks);
    plan::StepContext ctx = plan::context(in, train::Policy::sqrt_n(2));
    ctx.device = kCPU;
    peaks.steps = m.steps;
    const plan::StepReport c = plan::measure(program, ctx, peaks);
    CHECK(c.first_peak == m.first_peak);
    CHECK(c.peak == m.peak);
    CHECK(c.reserved == m.reserved);
    CHECK(c.at_peak == m.at_peak);
    CHECK(c.at_peak_by_owner == m.at_peak_by_owner);
  }
  train::StepOptions one, two;  // steady-state steps: their peak is in backward, not in the update
  two.accum = 2;
  CHECK(plan::plan(tiny_gpt(), in, two).peak > plan::plan(tiny_gpt(), in, one).peak);  // gradients held across
}

TEST_CASE("plan: a ChainModel policy does not change the GPT's own selective-recompute setting") {
  train::ChainModel chain(tiny_gpt(), kMeta);
  auto& gpt = dynamic_cast<nn::GPT&>(chain.module());
  auto [x, y] = chain.zero_inputs({2, 16});
  chain.loss(x, y, train::Policy::selective_only());
  for (size_t i = 0; i < gpt.h->size(); ++i) CHECK_FALSE((*gpt.h)[i].attn->selective_recompute);
}
