// Step time under a memory budget: a GPT and an MLP at 100/70/50/40/30% of their unconstrained
// peak, with dynamic rematerialization (DTR), with activation offload to the host pool, and with the
// planner's static plan (the DP's fewest-recompute checkpoint segments) for the same budget.
// Prints a markdown table for RESULTS.md; "-" where a method cannot meet the budget.
//   bench_budget [steps=3]
// The allocator's cache is off in every run (each block its own segment), so the limit binds on
// the bytes handed out, not on whole cached segments, and the peaks compare directly.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include <memgrad/core/budget/budget.h>
#include <memgrad/plan/planner.h>

using namespace mg;

namespace {

double cpu_seconds() {  // process CPU time: on a shared machine it counts work, not waiting
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Run {
  bool ok = false;
  double seconds = 0;  // median CPU seconds of the steps after the first
  int64_t peak = 0;
  std::string note;
};

// `steps` steps on a fresh model: under `options` when its limit is set, else plain under `policy`.
Run measure(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
            const train::Policy& policy, int steps, budget::Options options = {}) {
  Run r;
  const int64_t base = memory_stats().allocated;
  if (options.limit) {
    options.limit += base;
    budget::enable(kCPU, options);
    budget::reset_stats();
  }
  try {
    plan::StepRunner runner(model, input, step, kCPU);
    std::vector<double> times;
    for (int s = 0; s < steps; ++s) {
      const double t0 = cpu_seconds();
      const plan::StepReport rep = runner.step(policy);
      if (s > 0) times.push_back(cpu_seconds() - t0);
      r.peak = std::max(r.peak, rep.peak);
    }
    std::sort(times.begin(), times.end());
    r.seconds = times[times.size() / 2];
    r.ok = true;
  } catch (const OutOfMemoryError& e) {
    r.note = "does not fit";
  }
  budget::disable(kCPU);
  set_memory_limit(kCPU, 0);
  return r;
}

void bench(const char* name, const train::ModelSpec& model, const train::InputShape& input, int steps,
           budget::Cost cost) {
  const train::StepOptions step{optim::OptimizerSpec("adamw"), train::Precision::Float32};
  const Run free_run = measure(model, input, step, train::Policy::none(), steps);
  // Measured after one ordinary step, so AdamW's state is held throughout, as in the runs' peak.
  const plan::BlockCosts costs = plan::measure_block_costs(model, input, step);
  std::printf("\n### %s: unconstrained peak %s, step %.3f s (CPU time)\n\n", name, format_bytes(free_run.peak).c_str(),
              free_run.seconds);
  std::printf(
      "| budget | static plan (DP) | its peak | dynamic remat | its peak | evicted | recomputed (wall) | offload | its "
      "peak "
      "| host pool peak | fetched (ahead of use) |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  auto cell = [&](const Run& r) {
    char b[64];
    if (!r.ok) return std::string("- (" + r.note + ")");
    std::snprintf(b, sizeof b, "%.3f s (%+.0f%%)", r.seconds, 100.0 * (r.seconds / free_run.seconds - 1));
    return std::string(b);
  };
  for (double f : {1.0, 0.7, 0.5, 0.4, 0.3}) {
    const int64_t limit = int64_t(double(free_run.peak) * f);
    train::Policy dp = plan::choose_dp(costs, limit);
    Run fixed;
    if (plan::predicted_peak(costs, dp) <= limit) {
      fixed = measure(model, input, step, dp, steps);
    } else {
      fixed.note = "no segmentation fits";
    }
    // The DP's cost model is exact for meta's first step (see plan::BlockCosts); a measured peak
    // over the budget is shown as it is, marked.
    std::string over = fixed.ok && fixed.peak > limit ? " (over by " + format_bytes(fixed.peak - limit) + ", planned " +
                                                            format_bytes(plan::predicted_peak(costs, dp)) + ")"
                                                      : "";
    budget::Options remat{limit, budget::Remat::Dynamic, budget::Offload::None};
    remat.cost = cost;
    const Run dyn = measure(model, input, step, train::Policy::none(), steps, remat);
    const budget::Stats ds = budget::stats();
    budget::Options off{limit, budget::Remat::None, budget::Offload::Activations};
    off.cost = cost;
    const Run moved = measure(model, input, step, train::Policy::none(), steps, off);
    const budget::Stats os = budget::stats();
    int64_t evicted = 0;
    for (int64_t b : ds.evicted_bytes) evicted += b;
    auto peak = [](const Run& r) { return r.ok ? format_bytes(r.peak) : std::string("-"); };
    const std::string fetched =
        moved.ok ? std::to_string(os.fetches) + " (" + std::to_string(os.prefetches) + ")" : std::string("-");
    std::printf("| %.0f%% (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", 100 * f,
                format_bytes(limit).c_str(), cell(fixed).c_str(), (peak(fixed) + over).c_str(), cell(dyn).c_str(),
                peak(dyn).c_str(), dyn.ok ? format_bytes(evicted).c_str() : "-",
                dyn.ok ? (std::to_string(ds.rematerializations) + " in " +
                          std::to_string(int(ds.recompute_seconds * 1000)) + " ms")
                             .c_str()
                       : "-",
                cell(moved).c_str(), peak(moved).c_str(), moved.ok ? format_bytes(os.peak_host_bytes).c_str() : "-",
                fetched.c_str());
    std::fflush(stdout);
  }
}

}  // namespace

// bench_budget [steps (3)] [measured|modeled: budget::Cost of the dynamic remat and offload runs]
int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(2, std::atoi(argv[1])) : 3;
  const budget::Cost cost =
      argc > 2 && std::string(argv[2]) == "modeled" ? budget::Cost::Modeled : budget::Cost::Measured;
  std::printf("budget::Cost %s\n", cost == budget::Cost::Modeled ? "modeled" : "measured");
  set_caching(kCPU, false);
  nn::GPTConfig gpt;
  gpt.n_layer = 6, gpt.n_head = 4, gpt.n_embd = 128, gpt.vocab_size = 512, gpt.block_size = 128, gpt.dropout = 0.1;
  bench("GPT n_layer 6, n_embd 128, vocab 512, batch 8 x 128, dropout 0.1, AdamW", train::ModelSpec::gpt_model(gpt),
        {8, 128}, steps, cost);
  bench("MLP 8 layers of 256, batch 4096, AdamW", train::ModelSpec::mlp(8, 256), {4096, 1}, steps, cost);
  return 0;
}
