// The planner: Activation peaks of MLP chains against hand arithmetic, planned (meta) peaks against
// measured CPU peaks to the byte, the three segment choosers side by side, and the largest batch.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include <memgrad/plan/planner.h>

using namespace mg;
using plan::Policy;

namespace {

// An MLP block is y = relu(x W^T + b). Per block, what autograd saves:
//   linear saves x (the previous block's y, already counted there; the chain's input is Input)
//          and W (a Parameter, which stays Parameter);
//   relu saves its output y: batch * width * 4 bytes, rounded up to 512 B  -> one `a` per block.
// The pre-relu output z is saved by nobody and freed at once. The tail, mse_loss against zeros,
// computes d = y - target (sub saves nothing) and d * d, which saves d: one more `a`.
// A checkpoint segment keeps only its input: Activation when it is an earlier segment's output
// (the chain's input stays Input). Backward recomputes one segment at a time, last first; while
// segment j recomputes, the inputs of segments <= j and the kept blocks before it are still held,
// everything after it has been released, and so has d.
int64_t mlp_activation_peak_by_hand(int64_t n, int64_t a, const Policy& p) {
  std::vector<int64_t> end(size_t(n), -1);
  for (auto& s : p.segments) end[size_t(s.begin)] = s.end;
  int64_t held = 0, worst = 0;
  bool after_kept_block = true;  // at the chain's start: its input is Input, not Activation
  for (int64_t i = 0; i < n;) {
    // After a segment, its output is a fresh tensor saved by what follows: the next segment's
    // checkpoint or the next kept block's linear.
    if (!after_kept_block) held += a;
    if (end[size_t(i)] < 0) {
      held += a;  // y of a kept block
      after_kept_block = true;
      ++i;
      continue;
    }
    worst = std::max(worst, held + (end[size_t(i)] - i) * a);  // its recompute: one y per block
    after_kept_block = false;
    i = end[size_t(i)];
  }
  return std::max(worst, held + a);  // end of forward: + d of the loss
}

// half_gemm_workspace: the CPU backend multiplies half matrices in float32 through a Workspace
// buffer that the meta device does not allocate; it is off the peak, but it has its own peak.
void check_same(const plan::StepReport& meta, const plan::StepReport& cpu, bool half_gemm_workspace = false) {
  CHECK(meta.peak == cpu.peak);
  for (int c = 0; c < kNumCategories; ++c) {
    INFO("category ", std::string(category_name(Category(c))));
    CHECK(meta.at_peak[size_t(c)] == cpu.at_peak[size_t(c)]);
    if (half_gemm_workspace && Category(c) == Category::Workspace) {
      CHECK(meta.category_peak[size_t(c)] == 0);
      CHECK(cpu.category_peak[size_t(c)] > 0);
      continue;
    }
    CHECK(meta.category_peak[size_t(c)] == cpu.category_peak[size_t(c)]);
  }
  CHECK(meta.at_peak_by_owner == cpu.at_peak_by_owner);
  CHECK(meta.flops == cpu.flops);
  CHECK(meta.recompute_flops == cpu.recompute_flops);
}

nn::GPTConfig tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 16, c.n_layer = 4, c.n_head = 2, c.n_embd = 32;
  return c;
}

}  // namespace

TEST_CASE("plan: MLP Activation peaks equal the hand arithmetic (none, sqrt(n), DP)") {
  const int64_t batch = 6, width = 50;
  const int64_t a = 1536;  // 6 * 50 * 4 = 1200 bytes, rounded up to 512 B
  for (int64_t n : {16, 64}) {
    INFO("n = ", n);
    const auto model = plan::ModelSpec::mlp(n, width);
    const plan::InputShape input{batch, 1};
    const int64_t k = std::llround(std::sqrt(double(n)));  // 4 or 8 segments of 4 or 8 blocks

    auto none = plan::plan(model, input, {}, Policy::none());
    CHECK(none.peak_of(Category::Activation) == (n + 1) * a);  // n relu outputs + d
    CHECK(mlp_activation_peak_by_hand(n, a, Policy::none()) == (n + 1) * a);

    auto sqrt_n = plan::plan(model, input, {}, Policy::sqrt_n(n));
    // Recomputing the last segment: k - 1 segment inputs + n / k relu outputs.
    CHECK(sqrt_n.peak_of(Category::Activation) == (k - 1 + n / k) * a);
    CHECK(mlp_activation_peak_by_hand(n, a, Policy::sqrt_n(n)) == (k - 1 + n / k) * a);
    CHECK(sqrt_n.recompute_flops == double(n) * 2 * batch * width * width);  // every block once more

    const auto costs = plan::measure_block_costs(model, input);
    CHECK(costs.held_bytes == a);
    CHECK(costs.input_bytes == a);
    CHECK(costs.forward_flops == 2.0 * batch * width * width);
    // A budget with room for half the activations: the DP keeps some blocks and recomputes the rest.
    const int64_t budget = costs.overhead + (n / 2) * a;
    Policy dp = plan::choose_dp(costs, budget);
    CHECK(dp.recomputed_blocks() > 0);
    CHECK(dp.recomputed_blocks() < n);
    auto planned = plan::plan(model, input, {}, dp);
    CHECK(planned.peak_of(Category::Activation) == mlp_activation_peak_by_hand(n, a, dp));
    CHECK(planned.recompute_flops == double(dp.recomputed_blocks()) * 2 * batch * width * width);
    CHECK(plan::predicted_peak(costs, dp) <= budget);
  }
}

TEST_CASE("plan: the planned peak equals the measured CPU peak to the byte, every policy") {
  SUBCASE("MLP") {
    const auto model = plan::ModelSpec::mlp(9, 40);
    const plan::InputShape input{5, 1};
    const auto costs = plan::measure_block_costs(model, input);
    for (const Policy& p : {Policy::none(), Policy::every_block(9), Policy::sqrt_n(9), Policy::selective_only(),
                            plan::choose_dp(costs, costs.overhead + 5 * costs.held_bytes)}) {
      for (auto opt : {plan::OptimizerKind::AdamW, plan::OptimizerKind::SGDMomentum}) {
        INFO("policy ", p.name, " ", p.str());
        check_same(plan::plan(model, input, {opt}, p), plan::run_step(model, input, {opt}, p, kCPU));
      }
    }
  }
  SUBCASE("tiny GPT") {
    const auto model = plan::ModelSpec::gpt_model(tiny_gpt());
    const plan::InputShape input{3, 16};
    const auto costs = plan::measure_block_costs(model, input);
    for (const Policy& p : {Policy::none(), Policy::every_block(4), Policy::sqrt_n(4), Policy::selective_only(),
                            plan::choose_dp(costs, costs.overhead + 2 * costs.held_bytes)}) {
      INFO("policy ", p.name, " ", p.str());
      check_same(plan::plan(model, input, {}, p), plan::run_step(model, input, {}, p, kCPU));
    }
  }
  SUBCASE("half precision under autocast") {
    const auto model = plan::ModelSpec::gpt_model(tiny_gpt());
    const plan::InputShape input{2, 16};
    for (auto precision : {plan::Precision::Float16, plan::Precision::BFloat16}) {
      const plan::StepOptions step{plan::OptimizerKind::Adam, precision};
      for (const Policy& p : {Policy::none(), Policy::sqrt_n(4), Policy::selective_only()}) {
        INFO("policy ", p.name);
        auto meta = plan::plan(model, input, step, p);
        check_same(meta, plan::run_step(model, input, step, p, kCPU), /*half_gemm_workspace=*/true);
        // Saved activations are half: fewer Activation bytes than the float32 step.
        CHECK(meta.peak_of(Category::Activation) < plan::plan(model, input, {}, p).peak_of(Category::Activation));
      }
    }
  }
}

TEST_CASE("plan: checkpointing trades Activation bytes for recomputed FLOPs on a tiny GPT") {
  const auto model = plan::ModelSpec::gpt_model(tiny_gpt());
  const plan::InputShape input{3, 16};
  auto none = plan::plan(model, input);
  auto every = plan::plan(model, input, {}, Policy::every_block(4));
  auto selective = plan::plan(model, input, {}, Policy::selective_only());
  CHECK(none.recompute_flops == 0);
  CHECK(every.peak_of(Category::Activation) < selective.peak_of(Category::Activation));
  CHECK(selective.peak_of(Category::Activation) < none.peak_of(Category::Activation));
  // Selective recomputes only q k^T and att @ v: per block 2 * (2 * B * nh * T * T * hs) FLOPs
  // (B 3, nh 2, T 16, hs 16).
  CHECK(selective.recompute_flops == 4.0 * 2 * (2 * 3 * 2 * 16 * 16 * 16));
  // Parameters do not depend on the policy.
  CHECK(every.peak_of(Category::Parameter) == none.peak_of(Category::Parameter));
}

TEST_CASE("plan: GPT-2 1.5B at batch 8 x 1024 plans on meta without touching real memory") {
  nn::GPTConfig c;
  c.n_layer = 48, c.n_head = 25, c.n_embd = 1600;
  const int64_t cpu_before = memory_stats(kCPU).allocated;
  auto t0 = std::chrono::steady_clock::now();
  auto r = plan::plan(plan::ModelSpec::gpt_model(c), {8, 1024});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("GPT-2 1.5B, batch 8 x 1024, AdamW, first step: planned in %.3f s\n%s", s, r.str().c_str());
  CHECK(memory_stats(kCPU).allocated == cpu_before);
  CHECK(r.peak > 0);
}

TEST_CASE("plan: the three segment choosers side by side") {
  // Wide batch, narrow layers: activations (a = 512 * 32 * 4 = 65536 B per block) dominate.
  const int64_t n = 16, batch = 512, width = 32, a = 65536;
  const auto model = plan::ModelSpec::mlp(n, width);
  const plan::InputShape input{batch, 1};
  const auto costs = plan::measure_block_costs(model, input);
  REQUIRE(costs.held_bytes == a);
  const int64_t budget = costs.overhead + 9 * a;  // about half of no checkpointing's 17 a
  auto rows = plan::choose_segments(model, input, {}, budget);
  const std::string table = plan::choice_table(rows, budget);
  std::printf("%s", table.c_str());
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].method == "sqrt(n)");
  CHECK(rows[1].method == "Chen greedy");
  CHECK(rows[2].method == "DP");
  const double block_flops = 2.0 * batch * width * width;
  CHECK(rows[0].recompute_flops == n * block_flops);  // 4 segments of 4, all recomputed
  for (auto& r : rows) {
    INFO(r.method);
    CHECK(r.fits);
    CHECK(r.measured <= budget);
    CHECK(r.recompute_flops == r.policy.recomputed_blocks() * block_flops);
    CHECK(r.measured == plan::plan(model, input, {}, r.policy).peak);
    CHECK(table.find(std::to_string(r.measured)) != std::string::npos);
    CHECK(table.find(r.policy.str()) != std::string::npos);
  }
  // The DP may keep blocks outside segments, so it recomputes less than sqrt(n). It is optimal for
  // the cost model only: where a meta run overshoots, the model is asked for less and the DP can
  // then recompute more than the greedy (here: 10 blocks against 8).
  CHECK(rows[2].recompute_flops < rows[0].recompute_flops);
  CHECK(rows[2].policy.recomputed_blocks() == 10);
  CHECK(rows[1].policy.recomputed_blocks() == 8);
}

TEST_CASE("plan: the largest batch that fits a budget, per policy") {
  const auto model = plan::ModelSpec::mlp(16, 64);
  const int64_t budget = plan::plan(model, {100, 1}).peak;  // batch 100 with no checkpointing
  for (const Policy& p : {Policy::none(), Policy::sqrt_n(16), Policy::every_block(16)}) {
    INFO(p.name);
    const int64_t b = plan::largest_batch(model, {1, 1}, {}, p, budget);
    CHECK(b >= 100);
    CHECK(plan::plan(model, {b, 1}, {}, p).peak <= budget);
    CHECK(plan::plan(model, {b + 1, 1}, {}, p).peak > budget);
  }
  CHECK(plan::largest_batch(model, {1, 1}, {}, Policy::none(), budget) == 100);
  CHECK(plan::largest_batch(model, {1, 1}, {}, Policy::none(), 1) == 0);
}
