// Private to train/: the one training step that Trainer::step and the train_step of a ChainModel
// with its pieces held by the caller both run.
#pragma once
#include <functional>

#include <memgrad/train/trainer.h>

namespace mg::train::detail {

// One training step, rank r of N with `dp`; with `in_backward` (Trainer's step_in_backward) the
// optimizer steps inside the last backward. (See Trainer for what a step does.)
double run_step(nn::Module& model, optim::Optimizer* opt, amp::GradScaler* scaler, amp::MasterWeights* masters,
                const std::function<Tensor(int64_t)>& forward, const StepOptions& options,
                distributed::DataParallel* dp, Trainer::InBackward* in_backward = nullptr);

}  // namespace mg::train::detail
