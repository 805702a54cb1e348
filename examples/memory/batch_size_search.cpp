// Finding the largest batch that fits, two ways.
//
//   1. By trial, as people do by hand: a device of the budget's size (IsolatedAllocator: a fresh
//      caching allocator with that memory limit, as a GPU of that size), and find_max_batch_size runs
//      real training steps on it, halving the batch on each OutOfMemoryError, then bisecting between
//      the largest fit and the smallest failure. Each failed step unwinds and frees what it
//      allocated, so the search goes on. Several steps per trial: the first creates AdamW's state at
//      its end, and the steady state after it holds that state throughout.
//   2. By planning: plan::largest_batch runs the same steps on the meta device (shapes, no bytes),
//      where the ledger and the caching allocator behave exactly as on the CPU, to the steady state,
//      under a memory limit of the budget. No real memory is touched.
//
// Both must find the same batch. The step: an 8-layer MLP (Linear 128 -> 128 + ReLU), mse loss, AdamW.
//
//   batch_size_search [--gpt2]    --gpt2 adds GPT-2 124M at sequence 1024 under a 24 GiB budget
//                                 (meta only; a minute)
#include <cstring>

#include "ledger.h"

int main(int argc, char** argv) {
  const bool gpt2 = argc > 1 && std::strcmp(argv[1], "--gpt2") == 0;
  constexpr int64_t MiB = int64_t(1) << 20;
  const auto model = mg::train::ModelSpec::mlp(8, 128);
  const mg::train::StepOptions adamw{mg::optim::OptimizerSpec("adamw"), mg::train::Precision::Float32};
  const int64_t budget = 4 * MiB;

  // 1. Real steps on a 4 MiB device, a fresh one per trial, until a plan's steady state (checked below).
  const mg::plan::StepReport planned_steps = mg::plan::plan(model, {64, 1}, adamw);
  mg::BatchSizeResult found = mg::find_max_batch_size(
      [&](int64_t b) {
        mg::IsolatedAllocator device(mg::kCPU, budget);
        mg::plan::StepRunner run(model, {b, 1}, adamw, mg::kCPU);
        for (int64_t s = 0; s < planned_steps.steps; ++s) run.step(mg::train::Policy::none());
      },
      4096);
  std::printf(
      "8 x Linear(128, 128) + ReLU, AdamW, on a cpu device of %s (its caching allocator's limit), %lld steps:\n",
      mg::format_bytes(budget).c_str(), static_cast<long long>(planned_steps.steps));
  std::printf("  find_max_batch_size tried:");
  for (auto& t : found.attempts) std::printf(" %lld%s", (long long)t.batch_size, t.fits ? "" : "(oom)");
  std::printf("\n  -> batch %lld\n", (long long)found.batch_size);

  // 2. The same question to the planner, per checkpoint policy.
  std::printf("\n%-26s %14s %16s %16s\n", "plan::largest_batch", "largest batch", "allocated peak", "reserved peak");
  int64_t planned_none = 0;
  for (const mg::train::Policy& p :
       {mg::train::Policy::none(), mg::train::Policy::sqrt_n(8), mg::train::Policy::every_block(8)}) {
    const int64_t b = mg::plan::largest_batch(model, {1, 1}, adamw, p, budget);
    if (p.name == "none") planned_none = b;
    mg::plan::PlanOptions under;  // the smallest limit is sought below the budget: see the GPT-2 table
    under.memory_limit = budget;
    const mg::plan::StepReport r = mg::plan::plan(model, {b, 1}, adamw, p, under);
    std::printf("%-26s %14lld %16lld %16lld\n", p.name.c_str(), (long long)b, (long long)r.peak,
                (long long)r.smallest_limit);
  }
  std::printf(
      "(steady-state steps; reserved peak: the smallest memory limit, at most the budget, the steps run under)\n\n");
  demo::check(planned_steps.steady,
              "the plan's steps reach the steady state in " + std::to_string(planned_steps.steps) + " steps");
  demo::check(found.batch_size == planned_none,
              "the trial search and the planner agree on batch " + std::to_string(planned_none));
  const auto program = mg::plan::program(model, {1, 1}, adamw);
  demo::check(mg::plan::fits(program, mg::plan::context({planned_none, 1}), budget) &&
                  !mg::plan::fits(program, mg::plan::context({planned_none + 1, 1}), budget),
              "that batch runs under the budget and one more row does not");

  if (gpt2) {
    const int64_t GiB = int64_t(1) << 30, gpu = 24 * GiB;
    const auto gpt = mg::train::ModelSpec::gpt_model(mg::nn::GPTConfig::gpt2());
    std::printf("\nGPT-2 124M, sequence 1024, AdamW, budget %s (planned on meta, steady state):\n",
                mg::format_bytes(gpu).c_str());
    std::printf("%-14s %-13s %14s %16s %16s %16s\n", "policy", "precision", "largest batch", "allocated peak",
                "reserved peak", "first step");
    for (auto precision :
         {mg::train::Precision::Float32, mg::train::Precision::BFloat16, mg::train::Precision::BFloat16Storage})
      for (const mg::train::Policy& p : {mg::train::Policy::none(), mg::train::Policy::selective_only(),
                                         mg::train::Policy::sqrt_n(12), mg::train::Policy::every_block(12)}) {
        const mg::train::StepOptions step{mg::optim::OptimizerSpec("adamw"), precision};
        const int64_t b = mg::plan::largest_batch(gpt, {1, 1024}, step, p, gpu, {}, 1024);
        // Planned under the budget: a caching allocator is not monotone in its limit (one that empties
        // its cache sooner may pack better), so the smallest limit is sought below one known to run.
        mg::plan::PlanOptions under;
        under.memory_limit = gpu;
        const mg::plan::StepReport r = mg::plan::plan(gpt, {b, 1024}, step, p, under);
        std::printf("%-14s %-13s %14lld %16s %16s %16s\n", p.name.c_str(), mg::train::precision_name(precision),
                    (long long)b, mg::format_bytes(r.peak).c_str(), mg::format_bytes(r.smallest_limit).c_str(),
                    mg::format_bytes(r.first_peak).c_str());
        const auto prog = mg::plan::program(gpt, {1, 1024}, step);
        demo::check(r.smallest_limit <= gpu && !mg::plan::fits(prog, mg::plan::context({b + 1, 1024}, p), gpu),
                    "batch " + std::to_string(b) + " runs under 24 GiB, " + std::to_string(b + 1) + " does not");
      }
  }
  return demo::exit_code();
}
