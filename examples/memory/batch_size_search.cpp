// Finding the largest batch that fits, two ways.
//
//   1. By trial, as people do by hand: set_memory_limit makes the CPU behave like a device of that
//      size, and find_max_batch_size runs a real training step, halving the batch on each
//      OutOfMemoryError, then bisecting between the largest fit and the smallest failure. Each
//      failed step unwinds and frees what it allocated, so the search goes on.
//   2. By planning: plan::largest_batch runs the same step on the meta device (shapes, no bytes),
//      where the ledger fills exactly as on the CPU, so no real memory is touched.
//
// Both must find the same batch. The step: an 8-layer MLP (Linear 128 -> 128 + ReLU), mse loss,
// one AdamW step, the first step (Adam's state appears at its end).
//
//   batch_size_search [--gpt2]    --gpt2 adds GPT-2 124M at sequence 1024 under a 24 GiB budget
//                                 (meta only; a few seconds)
#include <cstring>

#include "ledger.h"

int main(int argc, char** argv) {
  const bool gpt2 = argc > 1 && std::strcmp(argv[1], "--gpt2") == 0;
  constexpr int64_t MiB = int64_t(1) << 20;
  const auto model = mg::plan::ModelSpec::mlp(8, 128);
  const mg::plan::StepOptions adamw{mg::plan::OptimizerKind::AdamW, mg::plan::Precision::Float32};
  const int64_t budget = 4 * MiB;

  // 1. Real steps under a limit. Caching off, so that reserved == allocated and "fits" means
  // "the step's peak stays under the limit" exactly (a cache would add whatever it holds).
  mg::set_caching(mg::kCPU, false);
  mg::set_memory_limit(mg::kCPU, mg::memory_stats().reserved + budget);
  mg::BatchSizeResult found = mg::find_max_batch_size(
      [&](int64_t b) {
        mg::plan::run_step(model, {b, 1}, adamw, mg::plan::Policy::none(), mg::kCPU);
      },
      4096);
  mg::set_memory_limit(mg::kCPU, 0);
  mg::set_caching(mg::kCPU, true);
  std::printf("8 x Linear(128, 128) + ReLU, AdamW, cpu limited to %s above what is held:\n",
              mg::format_bytes(budget).c_str());
  std::printf("  find_max_batch_size tried:");
  for (auto& t : found.attempts) std::printf(" %lld%s", (long long)t.batch_size, t.fits ? "" : "(oom)");
  std::printf("\n  -> batch %lld, peak %s\n", (long long)found.batch_size,
              mg::format_bytes(found.peak_allocated).c_str());

  // 2. The same question to the planner, per checkpoint policy.
  std::printf("\n%-28s %14s %16s\n", "plan::largest_batch, policy", "largest batch", "planned peak");
  int64_t planned_none = 0;
  for (const mg::plan::Policy& p :
       {mg::plan::Policy::none(), mg::plan::Policy::sqrt_n(8), mg::plan::Policy::every_block(8)}) {
    const int64_t b = mg::plan::largest_batch(model, {1, 1}, adamw, p, budget);
    if (p.name == "none") planned_none = b;
    std::printf("%-28s %14lld %16lld\n", p.name.c_str(), (long long)b,
                (long long)mg::plan::plan(model, {b, 1}, adamw, p).peak);
  }
  std::printf("\n");
  demo::check(found.batch_size == planned_none,
              "the trial search and the planner agree on batch " + std::to_string(planned_none));
  demo::check(mg::plan::plan(model, {planned_none, 1}, adamw).peak <= budget &&
                  mg::plan::plan(model, {planned_none + 1, 1}, adamw).peak > budget,
              "that batch fits the budget and one more row does not");

  if (gpt2) {
    const int64_t GiB = int64_t(1) << 30, gpu = 24 * GiB;
    const auto gpt = mg::plan::ModelSpec::gpt_model(mg::nn::GPTConfig::gpt2());
    std::printf("\nGPT-2 124M, sequence 1024, AdamW, budget %s (planned on meta):\n", mg::format_bytes(gpu).c_str());
    std::printf("%-28s %-10s %14s %16s\n", "policy", "precision", "largest batch", "planned peak");
    for (auto precision : {mg::plan::Precision::Float32, mg::plan::Precision::BFloat16})
      for (const mg::plan::Policy& p : {mg::plan::Policy::none(), mg::plan::Policy::selective_only(),
                                        mg::plan::Policy::sqrt_n(12), mg::plan::Policy::every_block(12)}) {
        const mg::plan::StepOptions step{mg::plan::OptimizerKind::AdamW, precision};
        const int64_t b = mg::plan::largest_batch(gpt, {1, 1024}, step, p, gpu, 1024);
        std::printf("%-28s %-10s %14lld %16s\n", p.name.c_str(),
                    precision == mg::plan::Precision::Float32 ? "fp32" : "bf16 amp", (long long)b,
                    b ? mg::format_bytes(mg::plan::plan(gpt, {b, 1024}, step, p).peak).c_str() : "-");
      }
  }
  return demo::exit_code();
}
