// Step time and peak memory of a small GPT on CPU under each checkpoint policy, and the time to
// plan GPT-2 1.5B at batch 8 x 1024 on the meta device. Prints markdown tables for RESULTS.md.
//   bench_recompute [steps=7] [n_layer=6] [n_embd=256] [batch=4] [seq=128] [vocab=8192] [n_head=4]
// The default model keeps GPT-2's proportions where they set the recompute cost: head size 64,
// vocab / n_embd = 32 (GPT-2 small: 65), and the lm head worth ~3 blocks of FLOPs (GPT-2 small:
// ~5); seq / (6 n_embd) = 8% (attention-core FLOPs against a block's linear FLOPs; GPT-2 small 22%,
// GPT-3 175B 3%). Policies run round-robin, one step each per round, so load drifts hit them alike.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <vector>

#include <memgrad/plan/planner.h>

using namespace mg;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
// CPU time of the whole process (all threads): on a shared machine it counts the work done, not the
// time spent waiting for a core.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}
}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, int64_t fallback) { return argc > i ? int64_t(std::atoll(argv[i])) : fallback; };
  const int steps = int(arg(1, 7));
  nn::GPTConfig config;
  config.n_layer = arg(2, 6), config.n_embd = arg(3, 256), config.block_size = arg(5, 128);
  config.vocab_size = arg(6, 8192), config.n_head = arg(7, 4);
  const auto model = train::ModelSpec::gpt_model(config);
  const train::InputShape input{arg(4, 4), arg(5, 128)};
  const train::StepOptions options{optim::OptimizerSpec("adamw"), train::Precision::Float32};
  const int64_t n = config.n_layer;

  // The planned policy: the DP's fewest-recompute plan for a budget halfway between the
  // every-block and no-checkpoint peaks.
  const auto costs = plan::measure_block_costs(model, input, options);
  const int64_t none_peak = plan::plan(model, input, options).peak;
  const int64_t every_peak = plan::plan(model, input, options, train::Policy::every_block(n)).peak;
  const int64_t budget = (none_peak + every_peak) / 2;
  train::Policy planned = plan::choose_dp(costs, budget);
  planned.name = "DP for " + format_bytes(budget);

  const std::vector<train::Policy> policies = {train::Policy::none(), train::Policy::every_block(n),
                                               train::Policy::sqrt_n(n), train::Policy::selective_only(), planned};
  std::printf(
      "GPT n_layer %lld n_head %lld n_embd %lld vocab %lld, batch %lld x %lld, AdamW fp32, median and min of %d steps "
      "per policy\n\n",
      (long long)n, (long long)config.n_head, (long long)config.n_embd, (long long)config.vocab_size,
      (long long)input.batch, (long long)input.seq_len, steps);
  std::vector<std::unique_ptr<plan::StepRunner>> runners;
  std::vector<plan::StepReport> first;
  for (const auto& policy : policies) {
    runners.push_back(std::make_unique<plan::StepRunner>(model, input, options, kCPU));
    first.push_back(runners.back()->step(policy));  // the first step creates the optimizer state: untimed
  }
  std::vector<std::vector<double>> ms(policies.size()), cpu_ms(policies.size());
  for (int s = 0; s < steps; ++s)
    for (size_t p = 0; p < policies.size(); ++p) {
      auto t0 = Clock::now();
      const double c0 = cpu_seconds();
      runners[p]->step(policies[p]);
      cpu_ms[p].push_back(1e3 * (cpu_seconds() - c0));
      ms[p].push_back(1e3 * seconds_since(t0));
    }
  std::printf(
      "| policy | segments | step ms (median) | vs none | step ms (min) | vs none | CPU ms (median) | vs none | "
      "recompute / step FLOPs | "
      "peak (CPU) | peak (planned) | Activation peak | saved vs none |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  double base_ms = 0, base_min = 0, base_cpu = 0;
  for (size_t p = 0; p < policies.size(); ++p) {
    std::sort(ms[p].begin(), ms[p].end());
    const double median = ms[p][ms[p].size() / 2];
    const double fastest = ms[p].front();
    std::sort(cpu_ms[p].begin(), cpu_ms[p].end());
    const double cpu = cpu_ms[p][cpu_ms[p].size() / 2];
    if (p == 0) base_ms = median, base_min = fastest, base_cpu = cpu;
    const int64_t predicted = plan::plan(model, input, options, policies[p]).peak;
    const plan::StepReport& r = first[p];
    std::printf("| %s | %s | %.1f | %+.1f%% | %.1f | %+.1f%% | %.1f | %+.1f%% | %.1f%% | %s | %s | %s | %s |\n",
                policies[p].name.c_str(), policies[p].str().c_str(), median, 100.0 * (median / base_ms - 1.0), fastest,
                100.0 * (fastest / base_min - 1.0), cpu, 100.0 * (cpu / base_cpu - 1.0),
                100.0 * r.recompute_flops / (r.flops - r.recompute_flops), format_bytes(r.peak).c_str(),
                format_bytes(predicted).c_str(), format_bytes(r.peak_of(Category::Activation)).c_str(),
                format_bytes(first[0].peak - r.peak).c_str());
  }

  nn::GPTConfig xl;
  xl.n_layer = 48, xl.n_head = 25, xl.n_embd = 1600;
  auto t0 = Clock::now();
  plan::StepReport big = plan::plan(train::ModelSpec::gpt_model(xl), {8, 1024}, options);
  std::printf("\nGPT-2 1.5B, batch 8 x 1024, AdamW fp32, no checkpointing: planned in %.3f s\n%s", seconds_since(t0),
              big.str().c_str());
  return 0;
}
