// Step time and peak memory of a small GPT on CPU under each checkpoint policy, and the time to
// plan GPT-2 1.5B at batch 8 x 1024 on the meta device. Prints markdown tables for RESULTS.md.
//   bench_recompute [steps=5] [n_layer=8] [n_embd=256] [batch=8] [seq=256]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <memgrad/plan/planner.h>

using namespace mg;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, int64_t fallback) { return argc > i ? int64_t(std::atoll(argv[i])) : fallback; };
  const int steps = int(arg(1, 5));
  nn::GPTConfig config;
  config.vocab_size = 2048, config.block_size = arg(5, 256), config.n_layer = arg(2, 8), config.n_head = 8;
  config.n_embd = arg(3, 256);
  const auto model = plan::ModelSpec::gpt_model(config);
  const plan::InputShape input{arg(4, 8), arg(5, 256)};
  const plan::StepOptions options{plan::OptimizerKind::AdamW, plan::Precision::Float32};
  const int64_t n = config.n_layer;

  // The planned policy: the DP's fewest-recompute plan for a budget halfway between the
  // every-block and no-checkpoint peaks.
  const auto costs = plan::measure_block_costs(model, input, options);
  const int64_t none_peak = plan::plan(model, input, options).peak;
  const int64_t every_peak = plan::plan(model, input, options, plan::Policy::every_block(n)).peak;
  const int64_t budget = (none_peak + every_peak) / 2;
  plan::Policy planned = plan::choose_dp(costs, budget);
  planned.name = "DP for " + format_bytes(budget);

  std::vector<plan::Policy> policies = {plan::Policy::none(), plan::Policy::every_block(n), plan::Policy::sqrt_n(n),
                                        plan::Policy::selective_only(), planned};
  std::printf(
      "GPT n_layer %lld n_head %lld n_embd %lld vocab %lld, batch %lld x %lld, AdamW fp32, median of %d steps\n\n",
      (long long)n, (long long)config.n_head, (long long)config.n_embd, (long long)config.vocab_size,
      (long long)input.batch, (long long)input.seq_len, steps);
  std::printf(
      "| policy | segments | step ms | time vs none | peak (CPU) | peak (planned) | Activation peak | saved vs none | "
      "recompute GFLOP |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  double base_ms = 0;
  int64_t base_peak = 0;
  for (const auto& policy : policies) {
    const int64_t predicted = plan::plan(model, input, options, policy).peak;
    plan::StepRunner runner(model, input, options, kCPU);
    plan::StepReport first = runner.step(policy);  // the first step creates the optimizer state: untimed
    std::vector<double> ms;
    for (int i = 0; i < steps; ++i) {
      auto t0 = Clock::now();
      runner.step(policy);
      ms.push_back(1e3 * seconds_since(t0));
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    if (policy.name == "none") base_ms = median, base_peak = first.peak;
    std::printf("| %s | %s | %.1f | %+.1f%% | %s | %s | %s | %s | %.2f |\n", policy.name.c_str(), policy.str().c_str(),
                median, 100.0 * (median / base_ms - 1.0), format_bytes(first.peak).c_str(),
                format_bytes(predicted).c_str(), format_bytes(first.peak_of(Category::Activation)).c_str(),
                format_bytes(base_peak - first.peak).c_str(), first.recompute_flops / 1e9);
  }

  nn::GPTConfig xl;
  xl.n_layer = 48, xl.n_head = 25, xl.n_embd = 1600;
  auto t0 = Clock::now();
  plan::StepReport big = plan::plan(plan::ModelSpec::gpt_model(xl), {8, 1024}, options);
  std::printf("\nGPT-2 1.5B, batch 8 x 1024, AdamW fp32, no checkpointing: planned in %.3f s\n%s", seconds_since(t0),
              big.str().c_str());
  return 0;
}
