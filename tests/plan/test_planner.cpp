// The planner: Activation peaks of MLP chains against hand arithmetic, planned (meta) peaks against
// measured CPU peaks to the byte, the three segment choosers side by side, and the largest batch.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

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
    // Here the parameters, gradients and AdamW moments (10 KiB a block) outweigh the activations
    // (1.5 KiB a block), so no segmentation lowers the peak. With a wider batch (300: a = 60,416 B)
    // activations dominate; a budget halfway between no and every-block checkpointing makes the DP
    // keep some blocks and recompute the rest.
    const plan::InputShape wide{300, 1};
    const int64_t a_wide = 60416;  // 300 * 50 * 4 = 60,000 bytes, rounded up to 512 B
    const auto wide_costs = plan::measure_block_costs(model, wide);
    CHECK(wide_costs.held_bytes == a_wide);
    const int64_t budget =
        (plan::plan(model, wide).peak + plan::plan(model, wide, {}, Policy::every_block(n)).peak) / 2;
    Policy dp = plan::choose_dp(wide_costs, budget);
    CHECK(dp.recomputed_blocks() > 0);
    CHECK(dp.recomputed_blocks() < n);
    auto planned = plan::plan(model, wide, {}, dp);
    CHECK(planned.peak_of(Category::Activation) == mlp_activation_peak_by_hand(n, a_wide, dp));
    CHECK(planned.recompute_flops == double(dp.recomputed_blocks()) * 2 * 300 * width * width);
    CHECK(plan::predicted_peak(wide_costs, dp) == planned.peak);
    CHECK(planned.peak <= budget);
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
  // The DP may keep blocks outside segments, so it recomputes less than sqrt(n); its cost model is
  // exact, so it also recomputes no more than the greedy (an approximate model once made it take 10
  // blocks against Chen's 8 here, after shrinking its budget by each meta overshoot).
  CHECK(rows[2].recompute_flops < rows[0].recompute_flops);
  CHECK(rows[2].recompute_flops <= rows[1].recompute_flops);
  CHECK(rows[2].predicted == rows[2].measured);
}

namespace {
// Every segmentation of n blocks: each block kept, starting a segment, or continuing one.
std::vector<Policy> all_policies(int64_t n) {
  std::vector<Policy> out;
  std::vector<int> state(size_t(n), 0);
  std::function<void(int64_t)> rec = [&](int64_t i) {
    if (i == n) {
      Policy p{"brute force", {}, false};
      for (int64_t j = 0; j < n; ++j) {
        if (state[size_t(j)] == 1) p.segments.push_back({j, j + 1});
        if (state[size_t(j)] == 2) p.segments.back().end = j + 1;
      }
      out.push_back(p);
      return;
    }
    for (int v = 0; v < 3; ++v) {
      if (v == 2 && (i == 0 || state[size_t(i - 1)] == 0)) continue;
      state[size_t(i)] = v;
      rec(i + 1);
    }
  };
  rec(0);
  return out;
}

struct Case {
  std::string name;
  plan::ModelSpec model;
  plan::InputShape input;
  plan::StepOptions step;
};

std::vector<Case> small_cases() {
  nn::GPTConfig g = tiny_gpt();
  g.n_layer = 5;
  return {
      {"MLP n=6 (wide batch)", plan::ModelSpec::mlp(6, 32), {512, 1}, {}},
      {"MLP n=6 (narrow batch, SGD momentum)", plan::ModelSpec::mlp(6, 40), {5, 1}, {plan::OptimizerKind::SGDMomentum}},
      {"tiny GPT n=5", plan::ModelSpec::gpt_model(g), {3, 16}, {}},
      {"tiny GPT n=5, steady-state step",
       plan::ModelSpec::gpt_model(g),
       {3, 16},
       {plan::OptimizerKind::AdamW, plan::Precision::Float32, 2}},
      {"tiny GPT n=5, bfloat16",
       plan::ModelSpec::gpt_model(g),
       {2, 16},
       {plan::OptimizerKind::Adam, plan::Precision::BFloat16}}};
}
}  // namespace

TEST_CASE("plan: the cost model equals the meta peak for every segmentation (brute force)") {
  for (const Case& k : small_cases()) {
    INFO(k.name);
    const auto costs = plan::measure_block_costs(k.model, k.input, k.step);
    for (const Policy& p : all_policies(k.model.num_blocks())) {
      INFO("policy ", p.str());
      CHECK(plan::predicted_peak(costs, p) == plan::plan(k.model, k.input, k.step, p).peak);
    }
  }
}

TEST_CASE("plan: the DP's plan is the fewest-recompute plan that fits when measured (brute force)") {
  for (const Case& k : small_cases()) {
    INFO(k.name);
    const int64_t n = k.model.num_blocks();
    const auto costs = plan::measure_block_costs(k.model, k.input, k.step);
    std::vector<std::pair<int64_t, int64_t>> measured;  // (peak, recomputed blocks) of every plan
    for (const Policy& p : all_policies(n))
      measured.push_back({plan::plan(k.model, k.input, k.step, p).peak, p.recomputed_blocks()});
    int64_t lowest = INT64_MAX, highest = 0;
    for (auto& [peak, r] : measured) lowest = std::min(lowest, peak), highest = std::max(highest, peak);
    // Budgets from below the lowest peak to the no-checkpoint peak, at every distinct peak and between.
    std::vector<int64_t> budgets = {lowest - 512, highest};
    for (auto& [peak, r] : measured) budgets.push_back(peak), budgets.push_back(peak - 512);
    std::sort(budgets.begin(), budgets.end());
    budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
    for (int64_t budget : budgets) {
      INFO("budget ", budget);
      int64_t best = INT64_MAX;  // fewest recomputed blocks among plans whose meta peak fits
      for (auto& [peak, r] : measured)
        if (peak <= budget) best = std::min(best, r);
      const Policy dp = plan::choose_dp(costs, budget);
      const int64_t peak = plan::plan(k.model, k.input, k.step, dp).peak;
      if (best == INT64_MAX) {
        CHECK(peak > budget);
        continue;
      }
      CHECK(peak <= budget);
      CHECK(dp.recomputed_blocks() == best);
    }
  }
}

TEST_CASE("plan: on measured-fitting plans the DP recomputes no more than Chen's greedy or sqrt(n)") {
  nn::GPTConfig g = tiny_gpt();
  g.n_layer = 8;
  const std::vector<Case> cases = {{"MLP n=16", plan::ModelSpec::mlp(16, 32), {512, 1}, {}},
                                   {"MLP n=64", plan::ModelSpec::mlp(64, 32), {256, 1}, {}},
                                   {"MLP n=16, narrow", plan::ModelSpec::mlp(16, 50), {6, 1}, {}},
                                   {"tiny GPT n=8", plan::ModelSpec::gpt_model(g), {3, 16}, {}}};
  for (const Case& k : cases) {
    const int64_t n = k.model.num_blocks();
    const int64_t none = plan::plan(k.model, k.input, k.step).peak;
    const int64_t every = plan::plan(k.model, k.input, k.step, Policy::every_block(n)).peak;
    const int64_t sqrt_n = plan::plan(k.model, k.input, k.step, Policy::sqrt_n(n)).peak;
    for (int64_t budget : {every, sqrt_n, (every + sqrt_n) / 2, (sqrt_n + none) / 2, (every + 3 * none) / 4, none}) {
      INFO(k.name, ", budget ", budget);
      auto rows = plan::choose_segments(k.model, k.input, k.step, budget);
      REQUIRE(rows.size() == 3);
      const auto& dp = rows[2];
      CHECK(dp.predicted == dp.measured);
      for (size_t i = 0; i < 2; ++i) {
        INFO(rows[i].method);
        if (!rows[i].fits) continue;
        CHECK(dp.fits);
        CHECK(dp.recompute_flops <= rows[i].recompute_flops);
      }
      if (budget >= none) CHECK(dp.recompute_flops == 0);
    }
  }
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
