#include "plan.h"

#include <chrono>
#include <cstdio>
#include <limits>

#include "report.h"

namespace memgrad_cli {

void add_plan_flags(CLI::App& app, PlanFlags& f) {
  add_model_flags(app, f.model);
  add_step_flags(app, f.step);
  add_data_parallel_flags(app, f.step);
  app.add_option("--world-size", f.step.world_size,
                 "data parallelism: plan one rank of this many processes (meta simulates it: no MPI needed)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  app.add_option("--rank", f.step.rank, "data parallelism: the rank planned (0 holds the largest slices)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("!--no-compare", f.compare, "skip the side-by-side table of policies");
  app.add_option("--top", f.top, "owners to list at the peak")
      ->transform(integer_in(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
}

int run_plan(const PlanFlags& f) {
  using namespace mg::plan;
  const auto t0 = std::chrono::steady_clock::now();
  const ModelSpec spec = model_spec(f.model, f.step.seq);
  const InputShape shape = input_shape(f.step);
  const int64_t params = parameter_count(spec);
  std::printf("memgrad plan: %s, %s parameters (%s in float32)\n", model_str(spec).c_str(), thousands(params).c_str(),
              mg::format_bytes(params * 4).c_str());
  if (f.step.rank >= f.step.world_size)
    throw UsageError("--rank " + std::to_string(f.step.rank) + ": expected a rank below --world-size " +
                     std::to_string(f.step.world_size));
  const bool data_parallel = f.step.world_size > 1 || f.step.zero > 0;
  if (data_parallel)
    std::printf("data parallel: rank %lld of %lld processes, ZeRO stage %d, buckets of %s\n",
                static_cast<long long>(f.step.rank), static_cast<long long>(f.step.world_size), f.step.zero,
                mg::format_bytes(int64_t(f.step.bucket_cap)).c_str());
  const Policy chosen = policy(f.step, spec, true);
  const StepOptions options = step_options(f.step);
  const StepReport r = plan(spec, shape, options, chosen);
  const StepReport first = plan(spec, shape, step_options(f.step, 1), chosen);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("step: batch %lld x %lld, %s, %s, checkpoint %s (%s); planned on meta in %s, no real memory\n\n",
              static_cast<long long>(f.step.batch), static_cast<long long>(f.step.seq), f.step.optimizer.c_str(),
              f.step.precision.c_str(), chosen.name.c_str(), chosen.str().c_str(), format_seconds(seconds).c_str());
  std::printf("predicted peak %s (%s B) in every step after the first:\n", mg::format_bytes(r.peak).c_str(),
              thousands(r.peak).c_str());
  print_breakdown(r.peak, r.at_peak, r.at_peak_by_owner, f.top);
  std::printf("  the first step peaks at %s (%s B): its optimizer state appears only at its end\n",
              mg::format_bytes(first.peak).c_str(), thousands(first.peak).c_str());
  std::printf("  FLOPs in the step: %.3g, of them recomputed: %.3g (%.1f%%)\n", r.flops, r.recompute_flops,
              r.flops ? 100.0 * r.recompute_flops / r.flops : 0.0);
  if (f.step.budget) {
    const int64_t b = largest_batch(spec, shape, options, chosen, int64_t(f.step.budget));
    std::printf("  largest batch within %s: %lld\n", mg::format_bytes(int64_t(f.step.budget)).c_str(),
                static_cast<long long>(b));
  }
  if (data_parallel) std::printf("\n%s", zero_table(spec, shape, options, chosen).c_str());
  if (!f.compare) return 0;

  // Each policy in float32 and both half precisions, all on meta, against no checkpointing in fp32;
  // for a GPT also the other attention core without checkpointing.
  const int64_t n = spec.num_blocks();
  const bool gpt = spec.kind == ModelSpec::Kind::GPT, fused = gpt && spec.gpt.fused_attention;
  struct Row {
    Policy policy;
    std::string precision;
    bool fused;
  };
  std::vector<Row> rows;
  for (const std::string precision : {"fp32", "fp16", "bf16"}) {
    for (const Policy& p : {Policy::none(), Policy::sqrt_n(n), Policy::selective_only(), Policy::every_block(n)})
      rows.push_back({p, precision, fused});
    if (gpt) rows.push_back({Policy::none(), precision, !fused});
  }
  std::printf("\npolicies side by side (batch %lld x %lld, %s):\n", static_cast<long long>(f.step.batch),
              static_cast<long long>(f.step.seq), f.step.optimizer.c_str());
  std::printf("  %-14s %-5s %11s %11s %11s %11s %9s %8s", "policy", "prec", "peak", "Activation", "Temporary",
              "OptState", "recompute", "vs none");
  if (f.step.budget) std::printf(" %10s", "max batch");
  std::printf("\n");
  int64_t none_peak = 0;
  for (auto& row : rows) {
    StepFlags s = f.step;
    s.precision = row.precision;
    ModelSpec row_spec = spec;
    row_spec.gpt.fused_attention = row.fused;
    const StepReport q = plan(row_spec, shape, step_options(s), row.policy);
    if (!none_peak) none_peak = q.peak;
    const std::string name = row.policy.name + (row.fused == fused ? "" : row.fused ? "+fused" : "+composed");
    std::printf("  %-14s %-5s %11s %11s %11s %11s %8.1f%% %+7.1f%%", name.c_str(), row.precision.c_str(),
                mg::format_bytes(q.peak).c_str(), mg::format_bytes(q.category(mg::Category::Activation)).c_str(),
                mg::format_bytes(q.category(mg::Category::Temporary)).c_str(),
                mg::format_bytes(q.category(mg::Category::OptimizerState)).c_str(),
                q.flops ? 100.0 * q.recompute_flops / q.flops : 0.0,
                100.0 * double(q.peak - none_peak) / double(none_peak));
    if (f.step.budget)
      std::printf(" %10lld", static_cast<long long>(
                                 largest_batch(row_spec, shape, step_options(s), row.policy, int64_t(f.step.budget))));
    std::printf("\n");
  }
  std::printf("  (categories at each plan's peak; recompute: share of the step's FLOPs spent recomputing%s)\n",
              gpt ? fused ? "; +composed: the textbook attention core" : "; +fused: --attention fused" : "");
  return 0;
}

}  // namespace memgrad_cli
