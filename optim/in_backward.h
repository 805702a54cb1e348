// The optimizer step inside backward (PyTorch's register_post_accumulate_grad_hook recipe,
// torchtune's OptimizerInBackward): each parameter is stepped as soon as backward has completed its
// gradient, and that gradient is freed at once, so the gradients' peak falls from all of them to
// about the largest one (GPT-2-124M: its tied embedding's 154 MB against 498 MB).
//
//   optim::AdamW opt(model.named_parameters());
//   optim::StepInBackward in_backward(opt);
//   loss.backward();  // every parameter with a gradient stepped, no gradient left
//
// Anything that needs all the gradients before the first step (clipping by the total norm, the
// GradScaler's skip on inf/NaN) cannot run inside one backward. train::Trainer solves it with two
// passes: the first backward (Mode::Measure) reduces each gradient to what the decision needs (its
// squared norm, whether it is finite) and frees it; then the forward runs again with the same random
// numbers and the second backward (Mode::Step) scales each gradient by the factors now known and
// steps. Gradient accumulation runs the earlier micro-batches in Mode::Accumulate.
//
// A parameter is stepped when its last contribution has arrived, after every node that used it in
// the forward has run its backward, so nothing reads a stepped value (a tensor saved elsewhere that
// shares its storage, through detach(), fails the saved-tensor version check instead). A backward
// that throws leaves the parameters stepped before the error stepped.
#pragma once
#include <functional>
#include <vector>

#include <memgrad/optim/optimizer.h>

namespace mg::optim {

class StepInBackward {
 public:
  enum class Mode {
    Step,        // run `before` (if any), step the parameter, free its gradient
    Accumulate,  // nothing: the gradient accumulates in .grad as without hooks
    Measure,     // run `before` (which must be set), then free the gradient; nothing is stepped
  };
  // Called with leaf i (its gradient complete in .grad) before it is stepped, or instead of it.
  using Visit = std::function<void(size_t i, const Tensor& leaf)>;

  // Hooks on `opt`'s parameters (index i counts them across groups); stepping is opt.step(param).
  explicit StepInBackward(Optimizer& opt);
  // Hooks on `leaves`; stepping leaf i calls step(i), which frees what it should (a leaf whose
  // optimizer updates a copy of it: float32 masters of half parameters).
  StepInBackward(std::vector<Tensor> leaves, std::function<void(size_t)> step);
  ~StepInBackward();  // removes the hooks
  StepInBackward(const StepInBackward&) = delete;
  StepInBackward& operator=(const StepInBackward&) = delete;

  // What the hooks do in the backward passes from now on (Mode::Step without `before` at first).
  void set_mode(Mode mode, Visit before = {});
  Mode mode() const { return mode_; }
  const std::vector<Tensor>& leaves() const { return leaves_; }

 private:
  void on_gradient(size_t i);
  std::vector<Tensor> leaves_;
  std::vector<uint64_t> hooks_;
  std::function<void(size_t)> step_;
  Mode mode_ = Mode::Step;
  Visit before_;
};

}  // namespace mg::optim
