#include "plan.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <map>

#include <CLI/CLI.hpp>

#include "data_source.h"
#include "paths.h"
#include "plan_file.h"
#include "report.h"
#include "sizes.h"

namespace memgrad_cli {

namespace {
// --measure auto runs plans on the cpu when the cost model predicts their steps take at most this.
constexpr double kMeasureAutoSeconds = 10;
constexpr int kMeasureSteps = int(mg::plan::kTimedSteps);  // what measure_plan runs
}  // namespace

void add_plan_flags(CLI::App& app, PlanFlags& f) {
  add_model_flags(app, f.model);
  add_step_flags(app, f.step);
  app.add_option("--device", f.device, "the device the plan is for: meta books the scratch its kernels allocate")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  add_data_parallel_flags(app, f.step);
  app.add_option("--offload", f.offload,
                 "params: plan the parameters, gradients and optimizer state in host memory, each block copied to "
                 "the device for its forward and backward (what memgrad train --offload params runs)")
      ->check(CLI::IsMember({"none", "params"}))
      ->capture_default_str();
  app.add_option("--world-size", f.step.world_size,
                 "data parallelism: plan one rank of this many processes (meta simulates it: no MPI needed)")
      ->transform(integer_in(1, int64_t(1) << 20))
      ->capture_default_str();
  app.add_option("--rank", f.step.rank, "data parallelism: the rank planned (0 holds the largest slices)")
      ->transform(integer_in(0, (int64_t(1) << 20) - 1))
      ->capture_default_str();
  app.add_flag("!--no-compare", f.compare, "skip the side-by-side tables of precisions and policies");
  app.add_option("--plan", f.plan,
                 "mixed: the fastest plan under --budget that keeps, recomputes (checkpoint segments, or each saved "
                 "tensor by an ILP) or offloads saved tensors, timed by the cost model, each candidate run on meta "
                 "under the budget")
      ->check(CLI::IsMember({"mixed"}));
  app.add_option("--save-plan", f.save_plan,
                 "--plan mixed: write the chosen plan to this file, which memgrad train --plan FILE carries out");
  app.add_option("--what-fits", f.what_fits,
                 "layers or width: the largest GPT of the model's family (more blocks, or more heads of the same "
                 "width) whose step runs under --budget on each rank, at every ZeRO stage and with --offload params, "
                 "planned exactly on meta, beside ZeRO's formula for model states alone")
      ->check(CLI::IsMember({"layers", "width"}));
  app.add_option("--pareto", f.pareto,
                 "write the memory-time curve (none, sqrt, selective, DP, ILP, mixed and dynamic remat; predicted, and "
                 "measured once on the cpu) to this HTML file (.svg: the picture alone)")
      ->check(non_empty("a file name"));
  app.add_option("--cost-model", f.cost_model,
                 "fit: the kernels' rates fitted to a few steps on the cpu (--device cpu) of the model cut to 2 "
                 "blocks; fixed: 100 GFLOP/s, 10 GB/s on any machine")
      ->check(CLI::IsMember({"fit", "fixed"}))
      ->capture_default_str();
  app.add_option("--measure", f.measure,
                 "--plan mixed and --pareto: run each plan's steps on the cpu to set its measured time beside the "
                 "predicted one; auto: when the cost model predicts they take at most " +
                     std::to_string(int(kMeasureAutoSeconds)) + " s")
      ->check(CLI::IsMember({"auto", "yes", "no"}))
      ->capture_default_str();
  app.add_option("--top", f.top, "owners to list at the peak")
      ->transform(integer_in(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
}

namespace {

// A plan that ran out of memory on meta, with no limit, has no numbers to show (its peaks would read
// 0 B): no device could run the step. Its sizes fit int64 (sizes.h), but not together.
mg::plan::StepReport planned(mg::plan::StepReport r) {
  if (r.out_of_memory)
    throw mg::OutOfMemoryError("no device can run this step (planned on meta, with no limit): " +
                               r.oom_message.substr(0, r.oom_message.find('\n')));  // (no cache would help)
  return r;
}

// --measure: whether plans predicted to take `predicted` seconds a step run on the cpu (measure_plan:
// kMeasureSteps steps), and if not, the reason for the report.
bool measuring(const PlanFlags& f, double predicted, std::string* why_not = nullptr) {
  const double seconds = predicted * double(kMeasureSteps);
  const bool yes = f.device == "cpu" && (f.measure == "yes" || (f.measure == "auto" && seconds <= kMeasureAutoSeconds));
  if (!yes && why_not) {
    char b[160];
    std::snprintf(b, sizeof b, "not measured: its %d steps on the cpu would take about %.0f s; --measure yes runs them",
                  kMeasureSteps, seconds);
    *why_not = f.device != "cpu"   ? "not measured: planned for --device " + f.device
               : f.measure == "no" ? "not measured: --measure no"
                                   : std::string(b);
  }
  return yes;
}

// Where the cost model's rates come from (cost_model_for).
std::string cost_model_origin(const mg::train::ModelSpec& spec, const std::string& cost_model) {
  if (cost_model != "fit") return "fixed";
  return "fitted to 3 steps on this cpu" + (spec.num_blocks() > kFitBlocks
                                                ? " of the model's first " + std::to_string(kFitBlocks) + " blocks"
                                                : std::string());
}

// --plan mixed and --pareto: plans timed by the cost model (plan/timed.h, plan/mixed.h).
int run_timed_plans(const PlanFlags& f, const mg::train::ModelSpec& spec, const mg::train::InputShape& shape,
                    const mg::plan::PlanOptions& options) {
  using namespace mg::plan;
  using namespace mg::train;
  if (!f.plan.empty() && !f.step.budget) throw UsageError("--plan mixed needs --budget (e.g. --budget 20MiB)");
  if (!f.save_plan.empty() && f.plan.empty()) throw UsageError("--save-plan writes the plan of --plan mixed: give it");
  if (!f.save_plan.empty()) check_writable("--save-plan", f.save_plan);
  const bool cpu = f.device == "cpu";
  if (f.cost_model == "fit" && !cpu) throw UsageError("--cost-model fit runs steps on the cpu: use --device cpu");
  if (f.measure == "yes" && !cpu) throw UsageError("--measure yes runs steps on the cpu: use --device cpu");
  const Program program = train_program(spec, f.step);
  StepContext ctx = context(shape);
  if (!f.plan.empty()) {
    const int64_t budget = int64_t(f.step.budget);
    std::vector<TimedPlan> candidates;  // chosen as memgrad train --plan mixed chooses it
    TimedPlan mixed = choose_mixed_plan(spec, f.step, budget, f.cost_model, options, &candidates);
    std::printf("cost model (%s): %s\n\n", cost_model_origin(spec, f.cost_model).c_str(),
                mixed.runtime.model.str().c_str());
    std::printf("candidates under %s (%lld B), each run on meta under it:\n%s\n", mg::format_bytes(budget).c_str(),
                static_cast<long long>(budget), pareto_table(candidates).c_str());
    const TimedPlan dp = best_recompute(candidates);
    if (!f.save_plan.empty()) save_plan(f.save_plan, mixed, plan_signature(spec, f.step));
    std::string not_measured;
    if (measuring(f, mixed.predicted, &not_measured)) measure_plan(program, ctx, mixed, options);
    const size_t apart = mixed.runtime.directives.size();  // a per-tensor plan's storages
    std::printf("mixed plan (the %s candidate won): %s, segments %s, %speak %lld B, predicted %.2f ms a step",
                mixed.chosen_from.c_str(), mixed.mode().c_str(), mixed.policy.str().c_str(),
                apart ? (std::to_string(apart) + " tensors planned apart, ").c_str() : "",
                static_cast<long long>(mixed.peak()), mixed.predicted * 1e3);
    if (mixed.measured >= 0)
      std::printf(" (measured once on the cpu: %.2f ms)", mixed.measured * 1e3);
    else if (!not_measured.empty())
      std::printf(" (%s)", not_measured.c_str());
    if (dp.fits()) std::printf("; the best recompute-only plan: %.2f ms", dp.predicted * 1e3);
    std::printf("\n");
    if (!f.save_plan.empty())
      std::printf("the plan: %s (memgrad train --plan %s carries it out)\n", f.save_plan.c_str(), f.save_plan.c_str());
  }
  if (f.pareto.empty()) return 0;
  const mg::budget::CostModel model = cost_model_for(spec, f.step, f.cost_model, options);
  if (f.plan.empty())
    std::printf("cost model (%s): %s\n\n", cost_model_origin(spec, f.cost_model).c_str(), model.str().c_str());
  // The budgets: shares of the unconstrained peak, and dynamic remat's floor.
  mg::budget::Options keep;
  keep.remat = mg::budget::Remat::None, keep.model = model;
  const TimedPlan none = time_plan(program, ctx, "none", Policy::none(), keep, 0, options);
  std::vector<int64_t> budgets;
  for (double share : {0.85, 0.7, 0.5, 0.4, 0.3}) budgets.push_back(int64_t(share * double(none.peak())) / 512 * 512);
  budgets.push_back((none.planned.floors[1][0].bytes + 511) / 512 * 512);
  std::vector<TimedPlan> points = pareto(program, ctx, budgets, model, options);
  double predicted = 0;  // the curve's steps together
  for (const TimedPlan& t : points) predicted += t.predicted;
  if (measuring(f, predicted))
    for (TimedPlan& t : points) measure_plan(program, ctx, t, options);
  std::printf("memory-time curve (%s):\n%s", model_str(spec).c_str(), pareto_table(points).c_str());
  const std::string name = spec.kind == ModelSpec::Kind::GPT
                               ? "GPT " + std::to_string(spec.gpt.n_layer) + " x " + std::to_string(spec.gpt.n_embd)
                               : "MLP " + std::to_string(spec.mlp_layers) + " x " + std::to_string(spec.mlp_width);
  const std::string title = name + ", batch " + std::to_string(f.step.batch) + " x " + std::to_string(f.step.seq) +
                            ", " + f.step.optimizer + ": step time against planned peak";
  const std::string svg = pareto_svg(points, title);
  const bool svg_only = f.pareto.size() > 4 && f.pareto.substr(f.pareto.size() - 4) == ".svg";
  mg::write_file_atomically(f.pareto,
                            svg_only
                                ? svg
                                : "<!doctype html><meta charset='utf-8'><title>memgrad: memory-time curve</title>\n" +
                                      svg + "<pre>" + pareto_table(points) + "</pre>\n",
                            "--pareto");
  std::printf("the curve: %s\n", f.pareto.c_str());
  return 0;
}

// The plans of the command's tables, each made once: a row that repeats another plan (the chosen one
// is the fp32 row of the precisions, the none row of the policies and the adamw row of the
// optimizers) reuses it. The tables read allocated figures only (PlanOptions::settle_reserved off).
class PlanMemo {
 public:
  const mg::plan::StepReport& get(const mg::train::ModelSpec& spec, const StepFlags& s, const mg::train::Policy& p,
                                  const mg::train::InputShape& shape, const mg::plan::PlanOptions& options) {
    const std::string k = key(spec, s, p, options);
    auto it = plans_.find(k);
    if (it == plans_.end()) {
      mg::plan::PlanOptions quick = options;
      quick.settle_reserved = false;
      it = plans_.emplace(k, planned(plan(train_program(spec, s), mg::plan::context(shape, p), quick))).first;
    }
    return it->second;
  }
  void put(const mg::train::ModelSpec& spec, const StepFlags& s, const mg::train::Policy& p,
           const mg::plan::PlanOptions& options, const mg::plan::StepReport& r) {
    plans_[key(spec, s, p, options)] = r;
  }

 private:
  static std::string key(const mg::train::ModelSpec& spec, const StepFlags& s, const mg::train::Policy& p,
                         const mg::plan::PlanOptions& o) {
    std::string k = model_str(spec) + "|" + std::to_string(spec.gpt.dropout) + "|" + std::to_string(o.memory_limit) +
                    "|" + std::to_string(int(o.device)) + "|" + p.name + " " + p.str() + (p.selective ? "+s" : "");
    for (int64_t v : {s.batch, s.seq, s.accum, int64_t(s.zero), int64_t(s.bucket_cap), s.world_size, s.rank,
                      int64_t(s.offload_params), int64_t(s.unit_prefetch), s.num_workers, s.prefetch,
                      int64_t(s.pin_memory), int64_t(s.step_in_backward), int64_t(s.expandable_segments)})
      k += "|" + std::to_string(v);
    return k + "|" + s.optimizer + "|" + std::to_string(s.momentum) + "|" + s.precision + "|" + std::to_string(s.clip);
  }
  std::map<std::string, mg::plan::StepReport> plans_;
};

// Each optimizer's plan in the chosen precision and policy, stepping after backward and inside it:
// the peak, the Gradient category's own peak, the optimizer state and the bytes per parameter
// (ZeRO's accounting: mixed-precision Adam holds 2 + 2 + K = 16 with K = 12).
void print_optimizers(const StepFlags& flags, const mg::train::ModelSpec& spec, const mg::train::InputShape& shape,
                      const mg::train::Policy& policy, const mg::plan::PlanOptions& options, int64_t params,
                      PlanMemo& plans) {
  std::printf("\noptimizers side by side (batch %lld x %lld, %s, checkpoint %s; bytes at the steady-state peak):\n",
              static_cast<long long>(flags.batch), static_cast<long long>(flags.seq), flags.precision.c_str(),
              policy.name.c_str());
  std::printf("  %-14s %-9s %11s %11s %11s %11s %9s %9s\n", "optimizer", "step", "peak", "Gradient", "OptState",
              "Param", "state/N", "P+G+S/N");
  const int stage = flags.offload_params ? 3 : flags.zero;  // the optimizer steps slices or pieces of parameters
  for (const mg::optim::OptimizerEntry& entry : mg::optim::optimizers())
    for (double momentum : entry.has_momentum ? std::vector<double>{0.0, 0.9} : std::vector<double>{0.0})
      for (bool in_backward : {false, true}) {
        if (in_backward && (flags.world_size > 1 || flags.zero > 0 || flags.offload_params)) continue;  // not with dp
        if (!entry.runs_sharded(stage)) continue;  // (see step_options)
        StepFlags s = flags;
        s.optimizer = entry.name, s.momentum = momentum, s.step_in_backward = in_backward;
        const mg::plan::StepReport& q = plans.get(spec, s, policy, shape, options);
        const int64_t grads = q.peak_of(mg::Category::Gradient), state = q.category(mg::Category::OptimizerState),
                      param = q.category(mg::Category::Parameter);
        const std::string label = mg::optim::OptimizerSpec(entry.name, momentum).label();
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

// What each precision mode stores (no checkpointing), and each policy in the chosen precision; all
// on meta. For a GPT, a layer's activations in units of s*b*h (sequence x batch x width).
void print_comparison(const StepFlags& flags, const mg::train::ModelSpec& spec, const mg::train::InputShape& shape,
                      const mg::train::Policy& chosen, const mg::plan::PlanOptions& options, int64_t params,
                      PlanMemo& plans) {
  using namespace mg::plan;
  using namespace mg::train;
  const int64_t n = spec.num_blocks();
  const bool gpt = spec.kind == ModelSpec::Kind::GPT, fused = gpt && spec.gpt.fused_attention;
  const double sbh = gpt ? double(flags.seq * flags.batch * spec.gpt.n_embd) : 0.0;
  std::printf("\nprecision modes side by side (no checkpointing; bytes at the steady-state peak):\n");
  std::printf("  %-13s %11s %11s %11s %11s %11s %11s", "precision", "peak", "Parameter", "Gradient", "OptState",
              "Activation", "Temp+Work");
  if (gpt) std::printf(" %11s", "layer/sbh");
  std::printf("\n");
  for (const char* precision : {"fp32", "fp16", "bf16", "fp16-storage", "bf16-storage"}) {
    StepFlags s = flags;
    s.precision = precision;
    const StepReport& q = plans.get(spec, s, Policy::none(), shape, options);
    std::printf("  %-13s %11s %11s %11s %11s %11s %11s", precision, mg::format_bytes(q.peak).c_str(),
                mg::format_bytes(q.category(mg::Category::Parameter)).c_str(),
                mg::format_bytes(q.category(mg::Category::Gradient)).c_str(),
                mg::format_bytes(q.category(mg::Category::OptimizerState)).c_str(),
                mg::format_bytes(q.category(mg::Category::Activation)).c_str(),
                mg::format_bytes(q.category(mg::Category::Temporary) + q.category(mg::Category::Workspace)).c_str());
    if (gpt) std::printf(" %11.2f", double(measure_held_bytes(spec, shape, step_options(s))) / sbh);
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
  std::printf("\npolicies side by side (batch %lld x %lld, %s, %s):\n", static_cast<long long>(flags.batch),
              static_cast<long long>(flags.seq), flags.optimizer.c_str(), flags.precision.c_str());
  std::printf("  %-14s %11s %11s %11s %9s %8s", "policy", "peak", "Activation", "Temporary", "recompute", "vs none");
  if (flags.budget) std::printf(" %10s", "max batch");
  std::printf("\n");
  int64_t none_peak = 0;
  for (auto& row : rows) {
    ModelSpec row_spec = spec;
    row_spec.gpt.fused_attention = row.fused;
    const Program row_program = train_program(row_spec, flags);
    const StepReport& q = plans.get(row_spec, flags, row.policy, shape, options);
    if (!none_peak) none_peak = q.peak;
    const std::string name = row.policy.name + (row.fused == fused ? "" : row.fused ? "+fused" : "+composed");
    std::printf("  %-14s %11s %11s %11s %8.1f%% %+7.1f%%", name.c_str(), mg::format_bytes(q.peak).c_str(),
                mg::format_bytes(q.category(mg::Category::Activation)).c_str(),
                mg::format_bytes(q.category(mg::Category::Temporary)).c_str(),
                q.flops ? 100.0 * q.recompute_flops / q.flops : 0.0,
                100.0 * double(q.peak - none_peak) / double(none_peak));
    if (flags.budget)
      std::printf(" %10lld", static_cast<long long>(largest_batch(row_program, context(shape, row.policy),
                                                                  int64_t(flags.budget), options)));
    std::printf("\n");
  }
  std::printf(
      "  (allocated bytes at each plan's steady-state peak; recompute: share of the step's FLOPs spent "
      "recomputing%s%s)\n",
      gpt ? fused ? "; +composed: the textbook attention core" : "; +fused: --attention fused" : "",
      flags.budget ? "; max batch: the largest whose steps run under the budget" : "");
  print_optimizers(flags, spec, shape, chosen, options, params, plans);
}

// --what-fits: the largest model of the family per ZeRO stage and offload mode, planned on meta (the
// reserved peak of a whole step), beside ZeRO's formula for model states alone.
int run_what_fits(const PlanFlags& f, const mg::train::ModelSpec& spec, const mg::plan::PlanOptions& options) {
  using namespace mg::plan;
  if (!f.step.budget) throw UsageError("--what-fits needs --budget (e.g. --budget 32GiB)");
  if (spec.kind != mg::train::ModelSpec::Kind::GPT) throw UsageError("--what-fits grows a GPT: not with --model mlp");
  const Family family = f.what_fits == "layers" ? Family::Layers : Family::Width;
  const int64_t budget = int64_t(f.step.budget);
  std::printf(
      "what fits under %s (%lld B) on each of %lld rank%s: the largest GPT by %s (%s), batch %lld x %lld, %s, %s\n",
      mg::format_bytes(budget).c_str(), static_cast<long long>(budget), static_cast<long long>(f.step.world_size),
      f.step.world_size == 1 ? "" : "s", family == Family::Layers ? "blocks" : "heads",
      family == Family::Layers ? ("n_embd " + std::to_string(spec.gpt.n_embd)).c_str()
                               : (std::to_string(spec.gpt.n_embd / spec.gpt.n_head) + " wide each, " +
                                  std::to_string(spec.gpt.n_layer) + " blocks")
                                     .c_str(),
      static_cast<long long>(f.step.batch), static_cast<long long>(f.step.seq), f.step.precision.c_str(),
      f.step.optimizer.c_str());
  std::printf("  %-22s %8s %18s   %-34s\n", "mode", family == Family::Layers ? "blocks" : "heads", "parameters",
              "ZeRO's formula (model states only)");
  const auto t0 = std::chrono::steady_clock::now();
  PlanOptions o = options;
  o.progress = [t0](const std::string& what) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 3) std::fprintf(stderr, "memgrad: what fits, %.0f s: trying %s\n", s, what.c_str());
  };
  for (int mode = 0; mode <= 4; ++mode) {  // stages 0-3, then --offload params
    StepFlags s = f.step;
    s.zero = mode == 4 ? 0 : mode, s.offload_params = mode == 4;
    const mg::train::StepOptions step = step_options(s);
    const LargestModel exact = largest_model(spec, family, input_shape(s), step, budget, 4096, o);
    const LargestModel formula = mode == 4 ? LargestModel{} : largest_by_formula(spec, family, step, budget);
    auto cell = [](const LargestModel& m) {
      return m.k ? std::to_string(m.k) + (m.capped ? "+" : "") + ": " + thousands(m.parameters) : std::string("none");
    };
    const std::string name = mode == 4 ? "--offload params" : "ZeRO stage " + std::to_string(mode);
    std::printf("  %-22s %8s %18s   %s\n", name.c_str(),
                exact.k ? (std::to_string(exact.k) + (exact.capped ? "+" : "")).c_str() : "none",
                exact.k ? thousands(exact.parameters).c_str() : "-",
                mode == 4 ? "- (the model states are in host memory)" : cell(formula).c_str());
  }
  std::printf(
      "  (the planner's: the reserved peak of a whole step within the budget, activations, gathered units, buckets\n"
      "   and the cache included; the formula's: parameters x ZeRO's bytes per parameter within it; + the search's "
      "cap)\n");
  return 0;
}

// Every rank's planned peaks: one plan per class of ranks whose shares have the same sizes (the same
// plan), so that any world size plans in the time of a few ranks.
void print_rank_classes(const mg::train::ModelSpec& spec, const mg::train::InputShape& shape, const StepFlags& flags,
                        const mg::train::Policy& chosen, const mg::plan::PlanOptions& options) {
  const std::vector<mg::distributed::RankClass> classes = mg::plan::rank_classes(spec, step_options(flags));
  std::printf("\nevery rank's planned peaks (allocated, reserved) at ZeRO stage %d: %lld ranks in %zu %s\n",
              step_options(flags).sharding_stage(), static_cast<long long>(flags.world_size), classes.size(),
              classes.size() == 1 ? "class (every rank's share has the same sizes: one plan)"
                                  : "classes (ranks whose shares have the same sizes have the same plan)");
  for (const mg::distributed::RankClass& c : classes) {
    StepFlags one = flags;
    one.rank = c.first();
    mg::plan::PlanOptions quick = options;
    quick.smallest_limit = false;
    const mg::plan::StepReport q = planned(plan(train_program(spec, one), mg::plan::context(shape, chosen), quick));
    std::printf("  %s %s: %s (%lld B), reserved %s (%lld B)\n", c.count == 1 ? "rank" : "ranks", c.str().c_str(),
                mg::format_bytes(q.peak).c_str(), static_cast<long long>(q.peak), mg::format_bytes(q.reserved).c_str(),
                static_cast<long long>(q.reserved));
  }
}

}  // namespace

int run_plan(const PlanFlags& f) {
  using namespace mg::plan;
  using namespace mg::train;
  const auto t0 = std::chrono::steady_clock::now();
  if (!f.pareto.empty()) check_writable("--pareto", f.pareto);  // before the curve's minutes of work
  // --save-plan alone was ignored (no file, exit 0); over --pareto's page, one of the two was lost
  if (!f.save_plan.empty() && f.plan.empty()) throw UsageError("--save-plan writes the plan of --plan mixed: give it");
  if (!f.save_plan.empty() && !f.pareto.empty()) check_apart("--save-plan", f.save_plan, "--pareto", f.pareto);
  const ModelSpec spec = model_spec(f.model, f.step.seq);
  check_sizes(spec, f.step);  // sizes.h: a size no device can hold is a usage error naming its flags
  const InputShape shape = input_shape(f.step);
  const int64_t params = parameter_count(spec);
  PlanOptions options;
  options.device = f.device == "cuda" ? mg::DeviceType::CUDA : mg::DeviceType::CPU;
  std::printf("memgrad plan: %s, %s parameters (%s in float32)\n", model_str(spec).c_str(), thousands(params).c_str(),
              mg::format_bytes(params * 4).c_str());
  if (f.step.rank >= f.step.world_size)
    throw UsageError("--rank " + std::to_string(f.step.rank) + ": expected a rank below --world-size " +
                     std::to_string(f.step.world_size));
  StepFlags flags = f.step;
  flags.offload_params = f.offload == "params";
  if (flags.offload_params && (flags.zero == 1 || flags.zero == 2))
    throw UsageError(
        "--offload params runs ZeRO-3's schedule with host memory as the shards' home: use it with "
        "--zero 0 or 3, not --zero " +
        std::to_string(flags.zero));
  const bool data_parallel = flags.world_size > 1 || flags.zero > 0 || flags.offload_params;
  if (data_parallel)
    std::printf("data parallel: rank %lld of %lld processes, ZeRO stage %d%s, %s\n", static_cast<long long>(flags.rank),
                static_cast<long long>(flags.world_size), flags.offload_params ? 3 : flags.zero,
                flags.offload_params ? " with the parameters in host memory (--offload params)" : "",
                flags.offload_params || flags.zero == 3
                    ? "each block a unit gathered for its forward and backward"
                    : ("buckets of " + mg::format_bytes(int64_t(flags.bucket_cap))).c_str());
  print_loader_plan(spec, flags, options.device);
  if (!f.what_fits.empty()) return run_what_fits(f, spec, options);
  if (!f.plan.empty() || !f.pareto.empty()) {
    if (data_parallel)  // the budget's runtime does not run with the units' or ranks' own schedules
      throw UsageError(
          "--plan / --pareto time one process's plans under a budget: expected no --zero, --world-size "
          "or --offload params, got ZeRO stage " +
          std::to_string(flags.zero));
    return run_timed_plans(f, spec, shape, options);
  }
  const Policy chosen = policy(flags, spec, true, options);
  const StepOptions step = step_options(flags);
  mg::reset_host_peak(mg::kMeta);
  const StepReport r = planned(plan(train_program(spec, flags), context(shape, chosen), options));
  const int64_t host_peak = mg::host_memory_stats(mg::kMeta).peak;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "step: batch %lld x %lld, %s%s, %s, checkpoint %s (%s), for %s; planned on meta in %s (%lld steps), no "
      "real memory\n\n",
      static_cast<long long>(flags.batch), static_cast<long long>(flags.seq), flags.optimizer.c_str(),
      flags.step_in_backward ? " stepped inside backward" : "", flags.precision.c_str(), chosen.name.c_str(),
      chosen.str().c_str(), f.device.c_str(), format_seconds(seconds).c_str(), static_cast<long long>(r.steps));
  print_plan(r);
  print_breakdown(r.peak, r.at_peak, r.at_peak_by_owner, f.top);
  if (flags.offload_params)
    std::printf("  host memory (parameters, gradients and optimizer state off the device): peak %s (%lld B)\n",
                mg::format_bytes(host_peak).c_str(), static_cast<long long>(host_peak));
  std::printf("  FLOPs in the step: %.3g, of them recomputed: %.3g (%.1f%%)\n", r.flops, r.recompute_flops,
              r.flops ? 100.0 * r.recompute_flops / r.flops : 0.0);
  for (const OutsideBytes& o : outside_allocator(options.device))
    std::printf("  outside memgrad's allocator (not planned): %s: %s\n", o.what.c_str(),
                o.bytes < 0 ? "depends on the driver and GPU (cuda::device_memory().outside_memgrad measures it)"
                            : (mg::format_bytes(o.bytes) + " (" + std::to_string(o.bytes) + " B)").c_str());
  if (flags.budget) {
    const int64_t b = largest_batch(train_program(spec, flags), context(shape, chosen), int64_t(flags.budget), options);
    std::printf("  largest batch whose steps run under %s: %lld\n", mg::format_bytes(int64_t(flags.budget)).c_str(),
                static_cast<long long>(b));
  }
  if (data_parallel && flags.world_size > 1) print_rank_classes(spec, shape, flags, chosen, options);
  if (data_parallel) std::printf("\n%s", zero_table(spec, shape, step, chosen).c_str());
  if (f.compare) {
    PlanMemo plans;
    plans.put(spec, flags, chosen, options, r);
    print_comparison(flags, spec, shape, chosen, options, params, plans);
  }
  return 0;
}

}  // namespace memgrad_cli
