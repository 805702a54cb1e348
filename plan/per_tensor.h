// A per-tensor plan under a memory budget: for each storage a step saves for backward, keep it,
// offload it to the host pool, or recompute it from its recipe (per op, not per segment), chosen by
// an integer linear program over a trace of one step on meta (Checkmate's MILP with offload as a
// third choice, as Beaumont et al. 2021), and carried out by the budget runtime as directives
// (budget::Directive), on meta as on the device.
//
// The model the program solves exactly (TensorProblem): the traced step's peak at each kernel's
// window with everything kept (base); a storage that leaves is gone during the longest stretch of
// kernels that do not use it (after `leave_after`, before `back_at`) and costs, in modeled seconds,
// its copy out and back (offload) or the replay of its recipe before `back_at` (recompute), which
// then holds `recompute_bytes` beside it in that window and needs the storages it reads resident.
// Everything else runs as traced. Each recompute is priced alone: where one replay makes what two
// planned recomputes need (a kernel's several outputs, a freed input), the run shares it, so the
// model's time bounds the run's from above (equal without recomputes). The meta run of the plan
// checks the model: choose_per_tensor proposes only plans that run under the budget to the byte
// there, and its prediction is that run's modeled time.
#pragma once
#include <string>
#include <vector>

#include <memgrad/plan/timed.h>

namespace mg::plan {

// A saved storage that a plan may send away (the trace's storages saved for backward whose longest
// unused stretch spans at least one kernel).
struct SavedStorage {
  int64_t birth = 0;  // budget::Directive::birth
  std::string kernel;
  int64_t bytes = 0;                     // rounded: what leaving frees
  int64_t leave_after = 0, back_at = 0;  // gone in the windows of kernels leave_after+1 .. back_at-1
  double offload_seconds = 0;            // out and back
  double recompute_seconds = -1;         // -1: it cannot be recomputed
  int64_t recompute_bytes = 0;           // held beside it while it is recomputed, in back_at's window
  std::vector<size_t> needs;             // storages (indices here) whose bytes its recompute reads
};

struct TensorProblem {
  std::vector<int64_t> base;  // reserved bytes at each kernel's window, everything kept
  std::vector<SavedStorage> storages;
  double step_seconds = 0;  // modeled, everything kept
};

enum class Choice : uint8_t { Keep, Offload, Recompute };

struct TensorPlan {
  std::vector<Choice> choices;  // one per storage of the problem
  bool feasible = false;        // some choice meets the budget in the model
  double seconds = 0;           // the model's step time
  int64_t peak = 0;             // the model's peak
  // The fastest such choices (to within solve_ilp's gap), or none exist; false: the best the solver
  // found in its time limit.
  bool optimal = false;
};

// The problem of a traced step (budget::trace of a step under the runtime's watch, Options::trace),
// priced by `model`.
TensorProblem tensor_problem(const budget::StepTrace& trace, const budget::CostModel& model);
// The model's figures of `choices`: the peak over the windows, the step time, and whether each
// storage a recompute needs is resident at its back_at.
int64_t model_peak(const TensorProblem& p, const std::vector<Choice>& choices);
double model_seconds(const TensorProblem& p, const std::vector<Choice>& choices);
bool model_consistent(const TensorProblem& p, const std::vector<Choice>& choices);
// The fastest choices with model_peak <= budget: an ILP (GLPK's branch and cut), which stops once
// the seconds its choices add to the step are within `gap` (relative) of the least possible (0:
// exactly the least), or every one of the 3^k (brute_force, k <= 12: what the tests check the ILP
// against). solve_ilp needs a build with GLPK (CMake's MG_GLPK; ilp_available()), else it raises Error.
bool ilp_available();
TensorPlan solve_ilp(const TensorProblem& p, int64_t budget, double gap = 1e-2);
TensorPlan brute_force(const TensorProblem& p, int64_t budget);
// The runtime's directives that carry `plan` out.
std::vector<budget::Directive> directives(const TensorProblem& p, const TensorPlan& plan);

// One steady step of `program` on meta under the runtime's watch (no limit), traced.
budget::StepTrace trace_step(const Program& program, const StepContext& ctx, const budget::CostModel& model,
                             const PlanOptions& options = {});
// The per-tensor plan for `budget` (method "ILP", its runtime's directives the plan): solved for the
// budget, run on meta under it and, where the model was short of the reserved bytes there, solved
// again for less until one fits (else fits() false).
TimedPlan choose_per_tensor(const Program& program, const StepContext& ctx, int64_t budget,
                            const budget::CostModel& model, const PlanOptions& options = {});

}  // namespace mg::plan
