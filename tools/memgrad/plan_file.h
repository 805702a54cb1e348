// A plan chosen by `memgrad plan --budget B --plan mixed` (or by `memgrad train` itself), carried out
// by `memgrad train`: choose_mixed_plan chooses it the way both commands do; --save-plan writes it as a
// small text file that `memgrad train --plan FILE` reads instead of choosing again; apply_plan puts a
// device under the plan's budget runtime.
#pragma once
#include <string>

#include "options.h"

namespace memgrad_cli {

// The cost model "fit" fits (plan::fit_cost_model) to steps on the cpu of the model cut to its first
// kFitBlocks blocks: the blocks are alike, so those run every kernel shape of the whole step, and
// the fit takes a fraction of the whole model's time (GPT-2 124M: 2 of its 12 blocks). "fixed":
// CostModel::fixed(). options.progress, when set, hears of each step.
inline constexpr int64_t kFitBlocks = 2;
mg::budget::CostModel cost_model_for(const mg::train::ModelSpec& spec, const StepFlags& flags,
                                     const std::string& cost_model, const mg::plan::PlanOptions& options);

// The fastest of the mixed plan's candidates that fits `budget` (plan/mixed.h), priced by the cost
// model fitted to the program on the cpu ("fit") or the fixed one ("fixed"); OutOfMemoryError when none
// fits. Says on stderr what it plans when that takes more than a few seconds.
mg::plan::TimedPlan choose_mixed_plan(const mg::train::ModelSpec& spec, const StepFlags& flags, int64_t budget,
                                      const std::string& cost_model, const mg::plan::PlanOptions& options,
                                      std::vector<mg::plan::TimedPlan>* candidates = nullptr);

// The run a plan is for (model and step flags): a plan is carried out only by the same run.
std::string plan_signature(const mg::train::ModelSpec& spec, const StepFlags& flags);
// Writes `p` (method, segments, the runtime's mode, cost model and directives, budget, predicted time
// and peaks) and `signature` to `path`; reads it back (UsageError naming --plan for a file that is not
// one, or is for another run).
void save_plan(const std::string& path, const mg::plan::TimedPlan& p, const std::string& signature);
mg::plan::TimedPlan load_plan(const std::string& path, const std::string& signature);

// Puts `device` under `p`'s budget runtime: its limit (the plan's budget), mode, directives and cost
// model, the cache off (the limit binds on the bytes handed out), as the plan ran on meta.
void apply_plan(const mg::Device& device, const mg::plan::TimedPlan& p);

}  // namespace memgrad_cli
