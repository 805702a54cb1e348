// Mixed plans under a memory budget: of every candidate that keeps, recomputes (checkpoint segments)
// or offloads (to the host pool) a step's saved tensors, the fastest that fits (choose_mixed), and the
// memory-time curve of every method (pareto). Each candidate is a TimedPlan (timed.h).
#pragma once
#include <string>
#include <vector>

#include <memgrad/plan/segments.h>
#include <memgrad/plan/timed.h>

namespace mg::plan {

// Every candidate plan under `budget`: the segmentations none, sqrt(n), selective, every block and
// the DP's choice (choose_dp) at targets spread from its least-memory choice to no checkpointing,
// each once keeping the rest (recompute only) and once offloading what exceeds the budget; and, in
// a build with GLPK, the per-tensor plan (choose_per_tensor, method "ILP").
std::vector<TimedPlan> mixed_candidates(const Program& program, const StepContext& ctx, int64_t budget,
                                        const budget::CostModel& model, const PlanOptions& options = {});
// The fastest predicted of `candidates` that fits (method "mixed"), and the fastest that only
// recomputes checkpoint segments (method "DP"), each with the candidate's method in chosen_from;
// method "none fits" (and fits() false) when nothing does.
TimedPlan best_mixed(const std::vector<TimedPlan>& candidates);
TimedPlan best_recompute(const std::vector<TimedPlan>& candidates);
TimedPlan choose_mixed(const Program& program, const StepContext& ctx, int64_t budget, const budget::CostModel& model,
                       const PlanOptions& options = {});

// The memory-time curve: none, sqrt(n), selective and every block without a budget, and at each of
// `budgets` the fastest recompute-only plan (DP), the mixed plan and dynamic remat (DTR). Points that
// do not fit are left out.
std::vector<TimedPlan> pareto(const Program& program, const StepContext& ctx, const std::vector<int64_t>& budgets,
                              const budget::CostModel& model, const PlanOptions& options = {});
// A table of the points (peak, predicted and measured time, mode, segments), and the curve drawn as
// an SVG (peak across, step time up; predicted dots joined per method, measured ones hollow).
std::string pareto_table(const std::vector<TimedPlan>& points);
std::string pareto_svg(const std::vector<TimedPlan>& points, const std::string& title);

}  // namespace mg::plan
