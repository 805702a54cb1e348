// The planner: Activation peaks of MLP chains against hand arithmetic, planned (meta) peaks against
// measured CPU peaks to the byte, the three segment choosers side by side, and the largest batch.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <utility>
#include <vector>

#include <memgrad/plan/planner.h>
#include <memgrad/plan/zero.h>

using namespace mg;
using train::Policy;

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

// Plans compared with peaks only: no search for the smallest limit (which runs a dozen more steps).
plan::PlanOptions peak_only() {
  plan::PlanOptions o;
  o.smallest_limit = false;
  return o;
}
plan::StepReport plan_peak(const train::ModelSpec& model, const train::InputShape& input,
                           const train::StepOptions& step = {}, const Policy& policy = Policy::none()) {
  return plan::plan(model, input, step, policy, peak_only());
}

// Everything a plan and a measured CPU run report, allocated and reserved, to the byte. The CPU
// backend multiplies half matrices in float32 through Workspace buffers: meta books them too.
void check_same(const plan::StepReport& meta, const plan::StepReport& cpu) {
  CHECK(meta.steps == cpu.steps);
  CHECK(meta.first_peak == cpu.first_peak);
  CHECK(meta.peak == cpu.peak);
  CHECK(meta.reserved == cpu.reserved);
  for (int c = 0; c < kNumCategories; ++c) {
    INFO("category ", std::string(category_name(Category(c))));
    CHECK(meta.at_peak[size_t(c)] == cpu.at_peak[size_t(c)]);
    CHECK(meta.category_peak[size_t(c)] == cpu.category_peak[size_t(c)]);
  }
  CHECK(meta.at_peak_by_owner == cpu.at_peak_by_owner);
  CHECK(meta.flops == cpu.flops);
  CHECK(meta.recompute_flops == cpu.recompute_flops);
}

// measure() of the same steps on the CPU as the plan ran.
plan::StepReport measured(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                          const Policy& policy, const plan::StepReport& planned) {
  plan::StepContext ctx = plan::context(input, policy);
  ctx.device = kCPU;
  plan::PlanOptions o;
  o.steps = planned.steps;
  return plan::measure(plan::program(model, input, step), ctx, o);
}

nn::GPTConfig tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 16, c.n_layer = 4, c.n_head = 2, c.n_embd = 32;
  return c;
}

}  // namespace

TEST_CASE("plan: policies by name, as --checkpoint and bench_train_step's MG_CHECKPOINT take them") {
  auto segments = [](const Policy& p) {
    std::vector<std::pair<int64_t, int64_t>> s;
    for (const auto& g : p.segments) s.push_back({g.begin, g.end});
    return s;
  };
  using Segs = std::vector<std::pair<int64_t, int64_t>>;
  CHECK(segments(Policy::parse("none", 5)).empty());
  CHECK_FALSE(Policy::parse("none", 5).selective);
  CHECK(Policy::parse("selective", 5).selective);
  CHECK(segments(Policy::parse("sqrt", 10)) == Segs{{0, 3}, {3, 6}, {6, 10}});  // round(sqrt(10)) = 3 segments
  CHECK(segments(Policy::parse("every-4", 10)) == Segs{{0, 4}, {4, 8}, {8, 10}});
  CHECK(segments(Policy::parse("every-1", 2)) == Segs{{0, 1}, {1, 2}});
  for (const char* bad : {"every-0", "every-11", "every-", "every-x", "every--1", "auto", "some"})
    CHECK_THROWS_AS(Policy::parse(bad, 10), ValueError);
}

TEST_CASE("plan: MLP Activation peaks equal the hand arithmetic (none, sqrt(n), DP)") {
  const int64_t batch = 6, width = 50;
  const int64_t a = 1536;  // 6 * 50 * 4 = 1200 bytes, rounded up to 512 B
  for (int64_t n : {16, 64}) {
    INFO("n = ", n);
    const auto model = train::ModelSpec::mlp(n, width);
    const train::InputShape input{batch, 1};
    const int64_t k = std::llround(std::sqrt(double(n)));  // 4 or 8 segments of 4 or 8 blocks

    auto none = plan_peak(model, input, {}, Policy::none());
    CHECK(none.peak_of(Category::Activation) == (n + 1) * a);  // n relu outputs + d
    CHECK(mlp_activation_peak_by_hand(n, a, Policy::none()) == (n + 1) * a);

    auto sqrt_n = plan_peak(model, input, {}, Policy::sqrt_n(n));
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
    const train::InputShape wide{300, 1};
    const int64_t a_wide = 60416;  // 300 * 50 * 4 = 60,000 bytes, rounded up to 512 B
    const auto wide_costs = plan::measure_block_costs(model, wide);
    CHECK(wide_costs.held_bytes == a_wide);
    const int64_t budget = (plan_peak(model, wide).peak + plan_peak(model, wide, {}, Policy::every_block(n)).peak) / 2;
    Policy dp = plan::choose_dp(wide_costs, budget);
    CHECK(dp.recomputed_blocks() > 0);
    CHECK(dp.recomputed_blocks() < n);
    auto planned = plan_peak(model, wide, {}, dp);
    CHECK(planned.peak_of(Category::Activation) == mlp_activation_peak_by_hand(n, a_wide, dp));
    CHECK(planned.recompute_flops == double(dp.recomputed_blocks()) * 2 * 300 * width * width);
    CHECK(plan::predicted_peak(wide_costs, dp) == planned.peak);
    CHECK(planned.peak <= budget);
  }
}

TEST_CASE("plan: planned equals measured on the CPU, allocated and reserved, every policy") {
  SUBCASE("MLP") {
    const auto model = train::ModelSpec::mlp(9, 40);
    const train::InputShape input{5, 1};
    const auto costs = plan::measure_block_costs(model, input);
    for (const Policy& p : {Policy::none(), Policy::every_block(9), Policy::sqrt_n(9), Policy::selective_only(),
                            plan::choose_dp(costs, costs.overhead + 5 * costs.held_bytes)}) {
      for (auto opt : {optim::OptimizerSpec("adamw"), optim::OptimizerSpec("sgd", 0.9)}) {
        INFO("policy ", p.name, " ", p.str());
        const auto planned = plan_peak(model, input, {opt}, p);
        check_same(planned, measured(model, input, {opt}, p, planned));
      }
    }
  }
  SUBCASE("tiny GPT") {
    const auto model = train::ModelSpec::gpt_model(tiny_gpt());
    const train::InputShape input{3, 16};
    const auto costs = plan::measure_block_costs(model, input);
    for (const Policy& p : {Policy::none(), Policy::every_block(4), Policy::sqrt_n(4), Policy::selective_only(),
                            plan::choose_dp(costs, costs.overhead + 2 * costs.held_bytes)}) {
      INFO("policy ", p.name, " ", p.str());
      const auto planned = plan_peak(model, input, {}, p);
      check_same(planned, measured(model, input, {}, p, planned));
    }
  }
  SUBCASE("half precision: autocast and storage, with the CPU's float32 scratch for half products") {
    const auto model = train::ModelSpec::gpt_model(tiny_gpt());
    const train::InputShape input{2, 16};
    for (auto precision : {train::Precision::Float16, train::Precision::BFloat16, train::Precision::BFloat16Storage}) {
      const train::StepOptions step{optim::OptimizerSpec("adam"), precision};
      for (const Policy& p : {Policy::none(), Policy::sqrt_n(4), Policy::selective_only()}) {
        INFO("policy ", p.name, ", precision ", train::precision_name(precision));
        const auto planned = plan_peak(model, input, step, p);
        check_same(planned, measured(model, input, step, p, planned));
        CHECK(planned.peak_of(Category::Workspace) > 0);  // the widened operands of the half products
        // Saved activations are half: fewer Activation bytes than the float32 step.
        CHECK(planned.peak_of(Category::Activation) < plan_peak(model, input, {}, p).peak_of(Category::Activation));
      }
    }
  }
}

TEST_CASE("plan: a plan for cuda books the cuda kernels' scratch, not the cpu's") {
  // The CPU widens half operands to float32 in scratch; cuBLAS multiplies them as they are.
  const auto model = train::ModelSpec::mlp(3, 64);
  const train::StepOptions step{optim::OptimizerSpec("sgd"), train::Precision::BFloat16Storage};
  plan::PlanOptions cpu = peak_only(), cuda = peak_only();
  cuda.device = DeviceType::CUDA;
  const auto for_cpu = plan::plan(model, {8, 1}, step, Policy::none(), cpu);
  const auto for_cuda = plan::plan(model, {8, 1}, step, Policy::none(), cuda);
  CHECK(for_cpu.peak_of(Category::Workspace) > 0);
  CHECK(for_cuda.peak_of(Category::Workspace) == 0);
  CHECK(for_cuda.target == DeviceType::CUDA);
  CHECK(plan::outside_allocator(DeviceType::CPU).empty());
  CHECK_FALSE(plan::outside_allocator(DeviceType::CUDA).empty());
}

TEST_CASE("plan: checkpointing trades Activation bytes for recomputed FLOPs on a tiny GPT") {
  const auto model = train::ModelSpec::gpt_model(tiny_gpt());
  const train::InputShape input{3, 16};
  auto none = plan_peak(model, input);
  auto every = plan_peak(model, input, {}, Policy::every_block(4));
  auto selective = plan_peak(model, input, {}, Policy::selective_only());
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
  auto r = plan_peak(train::ModelSpec::gpt_model(c), {8, 1024});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("GPT-2 1.5B, batch 8 x 1024, AdamW, steady state: planned in %.3f s\n%s", s, r.str().c_str());
  CHECK(r.steady);
  CHECK(memory_stats(kCPU).allocated == cpu_before);
  CHECK(r.peak > 0);
}

TEST_CASE("plan: the segment choosers side by side, each verified by a meta run under the budget") {
  // Wide batch, narrow layers: activations (a = 512 * 32 * 4 = 65536 B per block) dominate.
  const int64_t n = 16, batch = 512, width = 32, a = 65536;
  const auto model = train::ModelSpec::mlp(n, width);
  const train::InputShape input{batch, 1};
  const auto costs = plan::measure_block_costs(model, input);
  REQUIRE(costs.held_bytes == a);
  // Halfway between what every block as a segment and no checkpointing need (reserved bytes).
  const int64_t none = plan::plan(model, input).smallest_limit;
  const int64_t every = plan::plan(model, input, {}, Policy::every_block(n)).smallest_limit;
  const int64_t budget = (none + every) / 2 / plan::kGranule * plan::kGranule;
  auto rows = plan::choose_segments(model, input, {}, budget);
  const std::string table = plan::choice_table(rows, budget);
  std::printf("%s", table.c_str());
  REQUIRE(rows.size() == 5);
  const char* methods[] = {"none", "sqrt(n)", "Chen greedy", "DP", "every block"};
  for (size_t i = 0; i < rows.size(); ++i) CHECK(rows[i].method == methods[i]);
  const double block_flops = 2.0 * batch * width * width;
  CHECK(rows[1].recompute_flops == n * block_flops);  // 4 segments of 4, all recomputed
  for (auto& r : rows) {
    INFO(r.method);
    CHECK(r.fits == !r.planned.out_of_memory);
    CHECK(r.fits == plan::fits(plan::program(model, input, {}), plan::context(input, r.policy), budget));
    if (r.fits) CHECK(r.planned.reserved <= budget);
    CHECK(r.recompute_flops == r.policy.recomputed_blocks() * block_flops);
    // A limit changes no allocation of a run that fits (one that does not stops at its failure).
    if (r.fits) CHECK(r.planned.peak == plan_peak(model, input, {}, r.policy).peak);
    CHECK(table.find(r.policy.str()) != std::string::npos);
  }
  CHECK(rows[3].fits);                               // the DP
  CHECK(rows[3].predicted == rows[3].planned.peak);  // its cost model is exact here
  if (rows[1].fits) CHECK(rows[3].recompute_flops < rows[1].recompute_flops);
  const auto best = plan::best_fit(rows);
  REQUIRE(best);
  for (auto& r : rows)
    if (r.fits) CHECK(best->recompute_flops <= r.recompute_flops);
}

TEST_CASE("plan: --checkpoint auto never refuses a budget that one of its plans meets") {
  // A budget exactly at one row's smallest limit: that row runs under it, so best_fit finds a plan.
  const auto model = train::ModelSpec::mlp(8, 48);
  const train::InputShape input{300, 1};
  for (const Policy& p : {Policy::none(), Policy::sqrt_n(8), Policy::every_block(8)}) {
    INFO(p.name);
    const int64_t budget = plan::plan(model, input, {}, p).smallest_limit;
    const auto rows = plan::choose_segments(model, input, {}, budget);
    const auto best = plan::best_fit(rows);
    REQUIRE(best);
    CHECK(best->planned.reserved <= budget);
    CHECK(best->recompute_flops <= double(p.recomputed_blocks()) * 2 * 300 * 48 * 48);
  }
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
  train::ModelSpec model;
  train::InputShape input;
  train::StepOptions step;
};

std::vector<Case> small_cases() {
  nn::GPTConfig g = tiny_gpt();
  g.n_layer = 5;
  return {{"MLP n=6 (wide batch)", train::ModelSpec::mlp(6, 32), {512, 1}, {}},
          {"MLP n=6 (narrow batch, SGD momentum)",
           train::ModelSpec::mlp(6, 40),
           {5, 1},
           {optim::OptimizerSpec("sgd", 0.9)}},
          {"tiny GPT n=5", train::ModelSpec::gpt_model(g), {3, 16}, {}},
          {"tiny GPT n=5, SGD", train::ModelSpec::gpt_model(g), {3, 16}, {optim::OptimizerSpec("sgd")}},
          {"tiny GPT n=5, bfloat16 storage",
           train::ModelSpec::gpt_model(g),
           {2, 16},
           {optim::OptimizerSpec("adam"), train::Precision::BFloat16Storage}}};
}
}  // namespace

TEST_CASE("plan: the cost model equals the meta peak for every segmentation (brute force)") {
  for (const Case& k : small_cases()) {
    INFO(k.name);
    const auto costs = plan::measure_block_costs(k.model, k.input, k.step);
    for (const Policy& p : all_policies(k.model.num_blocks())) {
      INFO("policy ", p.str());
      CHECK(plan::predicted_peak(costs, p) == plan_peak(k.model, k.input, k.step, p).peak);
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
      measured.push_back({plan_peak(k.model, k.input, k.step, p).peak, p.recomputed_blocks()});
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
      const int64_t peak = plan_peak(k.model, k.input, k.step, dp).peak;
      if (best == INT64_MAX) {
        CHECK(peak > budget);
        continue;
      }
      CHECK(peak <= budget);
      CHECK(dp.recomputed_blocks() == best);
    }
  }
}

TEST_CASE("plan: for any allocated target the DP recomputes no more than Chen's greedy or sqrt(n)") {
  nn::GPTConfig g = tiny_gpt();
  g.n_layer = 8;
  const std::vector<Case> cases = {{"MLP n=16", train::ModelSpec::mlp(16, 32), {512, 1}, {}},
                                   {"MLP n=64", train::ModelSpec::mlp(64, 32), {256, 1}, {}},
                                   {"MLP n=16, narrow", train::ModelSpec::mlp(16, 50), {6, 1}, {}},
                                   {"tiny GPT n=8", train::ModelSpec::gpt_model(g), {3, 16}, {}}};
  for (const Case& k : cases) {
    const int64_t n = k.model.num_blocks();
    const auto costs = plan::measure_block_costs(k.model, k.input, k.step);
    const int64_t none = plan_peak(k.model, k.input, k.step).peak;
    const int64_t every = plan_peak(k.model, k.input, k.step, Policy::every_block(n)).peak;
    const int64_t sqrt_n = plan_peak(k.model, k.input, k.step, Policy::sqrt_n(n)).peak;
    for (int64_t target : {every, sqrt_n, (every + sqrt_n) / 2, (sqrt_n + none) / 2, (every + 3 * none) / 4, none}) {
      INFO(k.name, ", target ", target);
      const Policy dp = plan::choose_dp(costs, target);
      CHECK(plan::predicted_peak(costs, dp) == plan_peak(k.model, k.input, k.step, dp).peak);
      for (const Policy& other : {plan::choose_chen_greedy(costs, target), plan::choose_sqrt_n(costs)}) {
        INFO(other.name);
        if (plan::predicted_peak(costs, other) > target) continue;
        CHECK(plan::predicted_peak(costs, dp) <= target);
        CHECK(dp.recomputed_blocks() <= other.recomputed_blocks());
      }
      if (target >= none) CHECK(dp.recomputed_blocks() == 0);
    }
  }
}

TEST_CASE("plan: the largest batch whose steady-state steps run under a budget, per policy") {
  const auto model = train::ModelSpec::mlp(16, 64);
  const int64_t budget = plan::plan(model, {100, 1}).smallest_limit;  // batch 100, no checkpointing
  const auto prog = plan::program(model, {1, 1}, {});
  for (const Policy& p : {Policy::none(), Policy::sqrt_n(16), Policy::every_block(16)}) {
    INFO(p.name);
    const int64_t b = plan::largest_batch(model, {1, 1}, {}, p, budget);
    CHECK(b >= 100);
    CHECK(plan::fits(prog, plan::context({b, 1}, p), budget));
    CHECK_FALSE(plan::fits(prog, plan::context({b + 1, 1}, p), budget));
  }
  CHECK(plan::largest_batch(model, {1, 1}, {}, Policy::none(), budget) == 100);
  CHECK(plan::largest_batch(model, {1, 1}, {}, Policy::none(), 1) == 0);
}

TEST_CASE("plan: Lion keeps one float32 moment per parameter, 4 B each, exactly") {
  // An MLP of 3 Linear(128, 128): every tensor a multiple of the 512-byte granule, so the ledger's
  // bytes are the elements' bytes.
  const train::ModelSpec model = train::ModelSpec::mlp(3, 128);
  const train::InputShape input{4, 1};
  const int64_t params = 3 * (128 * 128 + 128);
  const auto state = [&](const optim::OptimizerSpec& o) {
    train::StepOptions step;
    step.optimizer = o;
    return plan::plan(model, input, step).category(Category::OptimizerState);
  };
  CHECK(state("lion") == 4 * params);
  CHECK(state("adamw") == 8 * params);
  CHECK(state(optim::OptimizerSpec("sgd", 0.9)) == 4 * params);
  CHECK(plan::optimizer_state_bytes_per_parameter("lion", false) == 4);
  CHECK(plan::optimizer_state_bytes_per_parameter("lion", true) == 8);  // + the float32 master
}
