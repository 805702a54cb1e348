#include "plan.h"

#include <chrono>
#include <cstdio>
#include <limits>

#include "data_source.h"
#include "report.h"

namespace memgrad_cli {

void add_plan_flags(CLI::App& app, PlanFlags& f) {
  add_model_flags(app, f.model);
  add_step_flags(app, f.step);
  app.add_option("--device", f.device, "the device the plan is for: meta books the scratch its kernels allocate")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  add_data_parallel_flags(app, f.step);
  app.add_option("--world-size", f.step.world_size,
                 "data parallelism: plan one rank of this many processes (meta simulates it: no MPI needed)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  app.add_option("--rank", f.step.rank, "data parallelism: the rank planned (0 holds the largest slices)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("!--no-compare", f.compare, "skip the side-by-side tables of precisions and policies");
  app.add_option("--top", f.top, "owners to list at the peak")
      ->transform(integer_in(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
}

namespace {

// Each optimizer's plan in the chosen precision and policy, stepping after backward and inside it:
// the peak, the Gradient category's own peak, the optimizer state and the bytes per parameter
// (ZeRO's accounting: mixed-precision Adam holds 2 + 2 + K = 16 with K = 12).
void print_optimizers(const PlanFlags& f, const mg::plan::ModelSpec& spec, const mg::plan::InputShape& shape,
                      const mg::plan::Policy& policy, const mg::plan::PlanOptions& options, int64_t params) {
  std::printf("\noptimizers side by side (batch %lld x %lld, %s, checkpoint %s; bytes at the steady-state peak):\n",
              static_cast<long long>(f.step.batch), static_cast<long long>(f.step.seq), f.step.precision.c_str(),
              policy.name.c_str());
  std::printf("  %-14s %-9s %11s %11s %11s %11s %9s %9s\n", "optimizer", "step", "peak", "Gradient", "OptState",
              "Param", "state/N", "P+G+S/N");
  const std::pair<const char*, double> kinds[] = {{"sgd", 0.0},      {"sgd", 0.9},      {"adam", 0.0},
                                                  {"adamw", 0.0},    {"adam8bit", 0.0}, {"adamw8bit", 0.0},
                                                  {"adafactor", 0.0}};
  for (auto [name, momentum] : kinds)
    for (bool in_backward : {false, true}) {
      if (in_backward && (f.step.world_size > 1 || f.step.zero > 0)) continue;  // not with data parallelism
      if (std::string(name) == "adafactor" && f.step.zero > 0) continue;        // nor under ZeRO 1-2
      StepFlags s = f.step;
      s.optimizer = name, s.momentum = momentum, s.step_in_backward = in_backward;
      mg::plan::PlanOptions quick = options;
      quick.smallest_limit = false;
      const mg::plan::StepReport q = plan(train_program(spec, s), mg::plan::context(shape, policy), quick);
      const int64_t grads = q.peak_of(mg::Category::Gradient), state = q.category(mg::Category::OptimizerState),
                    param = q.category(mg::Category::Parameter);
      const std::string label = std::string(name) + (momentum > 0 ? "+momentum" : "");
      std::printf("  %-14s %-9s %11s %11s %11s %11s %9.3f %9.3f\n", label.c_str(), in_backward ? "in bwd" : "after",
                  mg::format_bytes(q.peak).c_str(), mg::format_bytes(grads).c_str(), mg::format_bytes(state).c_str(),
                  mg::format_bytes(param).c_str(), double(state) / double(params),
                  double(param + grads + state) / double(params));
    }
  std::printf(
      "  (Gradient: the category's own peak in the step; OptState at the step's peak, masters included in the\n"
      "   storage precisions; state/N and P+G+S/N: bytes per parameter, ZeRO's K and its 2 + 2 + K = 16 for\n"
      "   mixed-precision Adam; step: after backward, or each parameter inside it (--step-in-backward))\n");
}

}  // namespace

int run_plan(const PlanFlags& f) {
  using namespace mg::plan;
  const auto t0 = std::chrono::steady_clock::now();
  const ModelSpec spec = model_spec(f.model, f.step.seq);
  const InputShape shape = input_shape(f.step);
  const int64_t params = parameter_count(spec);
  PlanOptions options;
  options.device = f.device == "cuda" ? mg::DeviceType::CUDA : mg::DeviceType::CPU;
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
  print_loader_plan(spec, f.step, options.device);
  const Policy chosen = policy(f.step, spec, true, options);
  const StepOptions step = step_options(f.step);
  const StepReport r = plan(train_program(spec, f.step), context(shape, chosen), options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "step: batch %lld x %lld, %s%s, %s, checkpoint %s (%s), for %s; planned on meta in %s (%lld steps), no "
      "real memory\n\n",
      static_cast<long long>(f.step.batch), static_cast<long long>(f.step.seq), f.step.optimizer.c_str(),
      f.step.step_in_backward ? " stepped inside backward" : "", f.step.precision.c_str(), chosen.name.c_str(),
      chosen.str().c_str(), f.device.c_str(), format_seconds(seconds).c_str(), static_cast<long long>(r.steps));
  print_plan(r);
  print_breakdown(r.peak, r.at_peak, r.at_peak_by_owner, f.top);
  std::printf("  FLOPs in the step: %.3g, of them recomputed: %.3g (%.1f%%)\n", r.flops, r.recompute_flops,
              r.flops ? 100.0 * r.recompute_flops / r.flops : 0.0);
  for (const OutsideBytes& o : outside_allocator(options.device))
    std::printf("  outside memgrad's allocator (not planned): %s: %s\n", o.what.c_str(),
                o.bytes < 0 ? "depends on the driver and GPU (cuda::device_memory().outside_memgrad measures it)"
                            : (mg::format_bytes(o.bytes) + " (" + std::to_string(o.bytes) + " B)").c_str());
  if (f.step.budget) {
    const int64_t b =
        largest_batch(train_program(spec, f.step), context(shape, chosen), int64_t(f.step.budget), options);
    std::printf("  largest batch whose steps run under %s: %lld\n", mg::format_bytes(int64_t(f.step.budget)).c_str(),
                static_cast<long long>(b));
  }
  if (data_parallel) std::printf("\n%s", zero_table(spec, shape, step, chosen).c_str());
  if (!f.compare) return 0;

  // What each precision mode stores (no checkpointing), and each policy in the chosen precision; all
  // on meta. For a GPT, a layer's activations in units of s*b*h (sequence x batch x width).
  const int64_t n = spec.num_blocks();
  const bool gpt = spec.kind == ModelSpec::Kind::GPT, fused = gpt && spec.gpt.fused_attention;
  const double sbh = gpt ? double(f.step.seq * f.step.batch * spec.gpt.n_embd) : 0.0;
  std::printf("\nprecision modes side by side (no checkpointing; bytes at the steady-state peak):\n");
  std::printf("  %-13s %11s %11s %11s %11s %11s %11s", "precision", "peak", "Parameter", "Gradient", "OptState",
              "Activation", "Temp+Work");
  if (gpt) std::printf(" %11s", "layer/sbh");
  std::printf("\n");
  for (const char* precision : {"fp32", "fp16", "bf16", "fp16-storage", "bf16-storage"}) {
    StepFlags s = f.step;
    s.precision = precision;
    PlanOptions quick = options;
    quick.smallest_limit = false;
    const StepReport q = plan(train_program(spec, s), context(shape), quick);
    std::printf("  %-13s %11s %11s %11s %11s %11s %11s", precision, mg::format_bytes(q.peak).c_str(),
                mg::format_bytes(q.category(mg::Category::Parameter)).c_str(),
                mg::format_bytes(q.category(mg::Category::Gradient)).c_str(),
                mg::format_bytes(q.category(mg::Category::OptimizerState)).c_str(),
                mg::format_bytes(q.category(mg::Category::Activation)).c_str(),
                mg::format_bytes(q.category(mg::Category::Temporary) + q.category(mg::Category::Workspace)).c_str());
    if (gpt) std::printf(" %11.2f", double(measure_block_costs(spec, shape, step_options(s)).held_bytes) / sbh);
    std::printf("\n");
  }
  std::printf(
      "  (autocast keeps float32 parameters and gradients and saves half copies of what its matmuls use;\n"
      "   storage modes keep the model in half and float32 masters (OptState); see docs/precision.md%s)\n",
      gpt ? "; layer/sbh: one block's saved tensors and output" : "");

  struct Row {
    Policy policy;
    bool fused;
  };
  std::vector<Row> rows;
  for (const Policy& p : {Policy::none(), Policy::sqrt_n(n), Policy::selective_only(), Policy::every_block(n)})
    rows.push_back({p, fused});
  if (gpt) rows.push_back({Policy::none(), !fused});
  std::printf("\npolicies side by side (batch %lld x %lld, %s, %s):\n", static_cast<long long>(f.step.batch),
              static_cast<long long>(f.step.seq), f.step.optimizer.c_str(), f.step.precision.c_str());
  std::printf("  %-14s %11s %11s %11s %9s %8s", "policy", "peak", "Activation", "Temporary", "recompute", "vs none");
  if (f.step.budget) std::printf(" %10s", "max batch");
  std::printf("\n");
  int64_t none_peak = 0;
  for (auto& row : rows) {
    ModelSpec row_spec = spec;
    row_spec.gpt.fused_attention = row.fused;
    PlanOptions quick = options;
    quick.smallest_limit = false;
    const Program row_program = train_program(row_spec, f.step);
    const StepReport q = plan(row_program, context(shape, row.policy), quick);
    if (!none_peak) none_peak = q.peak;
    const std::string name = row.policy.name + (row.fused == fused ? "" : row.fused ? "+fused" : "+composed");
    std::printf("  %-14s %11s %11s %11s %8.1f%% %+7.1f%%", name.c_str(), mg::format_bytes(q.peak).c_str(),
                mg::format_bytes(q.category(mg::Category::Activation)).c_str(),
                mg::format_bytes(q.category(mg::Category::Temporary)).c_str(),
                q.flops ? 100.0 * q.recompute_flops / q.flops : 0.0,
                100.0 * double(q.peak - none_peak) / double(none_peak));
    if (f.step.budget)
      std::printf(" %10lld", static_cast<long long>(largest_batch(row_program, context(shape, row.policy),
                                                                  int64_t(f.step.budget), options)));
    std::printf("\n");
  }
  std::printf(
      "  (allocated bytes at each plan's steady-state peak; recompute: share of the step's FLOPs spent "
      "recomputing%s%s)\n",
      gpt ? fused ? "; +composed: the textbook attention core" : "; +fused: --attention fused" : "",
      f.step.budget ? "; max batch: the largest whose steps run under the budget" : "");
  print_optimizers(f, spec, shape, chosen, options, params);
  return 0;
}

}  // namespace memgrad_cli
