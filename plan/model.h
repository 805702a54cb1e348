// The planner's entry points for the built-in models (train::ModelSpec, run as a train::ChainModel
// with a train::Trainer): program(), plan() and run_step() of a ModelSpec, and StepRunner.
#pragma once
#include <memory>

#include <memgrad/plan/plan.h>
#include <memgrad/train/model.h>

namespace mg::plan {

// The built-in model as a program: a ChainModel and a Trainer built on ctx.device, a fresh zero
// input and target per micro-batch of ctx.batch rows (and input.seq_len positions).
Program program(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step);
StepContext context(const train::InputShape& input, const train::Policy& policy = train::Policy::none());

// plan(program(model, input, step), context(input, policy), options).
StepReport plan(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step = {},
                const train::Policy& policy = train::Policy::none(), const PlanOptions& options = {});
// measure(...) of the same on `device` (its own fresh allocator, no limit).
StepReport run_step(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                    const train::Policy& policy, const Device& device);

// A built-in model, its inputs and trainer built once on a device, for running several steps
// (benchmarks) in the device's own allocator. Byte figures count from what was live before the
// runner was built; peaks from a reset_peak at each step's start.
class StepRunner {
 public:
  StepRunner(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
             const Device& device);
  ~StepRunner();
  StepReport step(const train::Policy& policy);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mg::plan
