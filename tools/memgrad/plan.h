// `memgrad plan`: one training step on the meta device (shapes, no bytes): the predicted peak
// and its breakdown, policies side by side, segments and the largest batch for a budget, a plan that
// mixes recompute and offload under a budget, and the memory-time curve of every method.
#pragma once
#include "options.h"

namespace memgrad_cli {

struct PlanFlags {
  ModelFlags model{"gpt2-124m"};
  StepFlags step{8, 1024, mg::optim::default_optimizer(), 0.0, "fp32", "none", 0,
                 1, 1.0};          // clip 1.0, as memgrad train
  std::string device = "cpu";      // the device the plan is for
  std::string offload = "none";    // none | params (StepFlags::offload_params)
  bool compare = true;             // the side-by-side table of policies
  int top = 10;                    // owners listed
  std::string plan;                // mixed: keep/recompute/offload for --budget
  std::string save_plan;           // the mixed plan's file, for memgrad train --plan FILE
  std::string what_fits;           // layers | width: the largest model of that family under --budget
  std::string pareto;              // the memory-time curve's HTML or SVG file
  std::string cost_model = "fit";  // fit (cpu: on this machine) | fixed
  std::string measure = "auto";    // --plan mixed, --pareto: run the plans on the cpu (auto | yes | no)
};

void add_plan_flags(CLI::App& app, PlanFlags& f);
int run_plan(const PlanFlags& f);

}  // namespace memgrad_cli
