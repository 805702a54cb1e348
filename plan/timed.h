// Plans timed by a cost model: a step's plan under the budget runtime (TimedPlan), run on meta
// (time_plan) and on the device (measure_plan). Times are the budget runtime's modeled seconds
// (budget::CostModel) of a meta run, with the model fitted to this machine's kernels on the program
// itself (fit_cost_model); with modeled costs the runtime decides on the device exactly as on meta,
// so a plan's prediction is a run's prediction, and measure_plan checks it against the clock. The
// planners that choose among such plans: mixed.h (segments, offload, and the best of all) and
// per_tensor.h (an ILP per saved tensor).
#pragma once
#include <string>

#include <memgrad/plan/plan.h>

namespace mg::plan {

// Steps a plan runs (time_plan on meta, measure_plan on the device) unless PlanOptions::steps says:
// the second step onwards holds the optimizer state, three alike.
inline constexpr int64_t kTimedSteps = 4;

// A step's plan under the budget runtime: checkpoint segments (`policy`) and the runtime's mode
// (`runtime`: remat None with offload None is a plain limit; offload Activations sends saved
// tensors to the host pool and prefetches them ahead of their backward; directives, a per-tensor
// plan's keep, offload or recompute of each saved storage), run under `budget` bytes (0: none).
struct TimedPlan {
  std::string method;  // none, sqrt, selective, every block, DP, ILP (plan/per_tensor.h), mixed, dynamic
  train::Policy policy;
  budget::Options runtime;
  int64_t budget = 0;
  StepReport planned;       // the meta run (steps: PlanOptions::steps, else kTimedSteps)
  double predicted = 0;     // planned.modeled_step_seconds: the last step's modeled time
  double measured = -1;     // measure_plan: its fastest steady step's wall time there (-1: not measured)
  std::string chosen_from;  // mixed and DP: the candidate's own method
  bool fits() const { return !planned.out_of_memory; }
  int64_t peak() const { return planned.reserved; }  // the cache is off under the runtime: allocated bytes
  std::string mode() const;                          // "keep", "recompute", "offload", "remat", ...
};

// The cost model of this machine for `program`: two steps on ctx.device (cpu or cuda) under the
// budget runtime without a limit, then options.steps (at least 3) timed ones, each fitted on its own
// by budget::fit_cost_model (the step's time outside kernels spread over its kernels); the fastest
// step's fit is kept, as measure_plan keeps a plan's fastest step. Host copies are timed on the
// program's own: a step with activations offloaded under a limit halfway from that mode's floor to the
// peak. options.progress, when set,
// hears of each step.
budget::CostModel fit_cost_model(const Program& program, const StepContext& ctx, const PlanOptions& options = {});
// `p` run on meta under `budget` in the runtime's mode `runtime` with cost model `model`.
TimedPlan time_plan(const Program& program, const StepContext& ctx, const std::string& method, const train::Policy& p,
                    budget::Options runtime, int64_t budget, const PlanOptions& options = {});
// Runs `p` on ctx.device under its budget and mode, and sets p.measured to its fastest step's seconds
// after the first
// (left at -1 when the run there runs out of memory: the report says so).
StepReport measure_plan(const Program& program, const StepContext& ctx, TimedPlan& p, const PlanOptions& options = {});

}  // namespace mg::plan
