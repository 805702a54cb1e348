#include <memgrad/optim/in_backward.h>

#include <memgrad/core/error.h>

namespace mg::optim {

namespace {
std::vector<Tensor> parameters_of(Optimizer& opt) {
  std::vector<Tensor> r;
  for (auto& g : opt.param_groups()) r.insert(r.end(), g.params.begin(), g.params.end());
  return r;
}
}  // namespace

StepInBackward::StepInBackward(Optimizer& opt)
    : StepInBackward(parameters_of(opt), [&opt, params = parameters_of(opt)](size_t i) {
        opt.step(params[i]);
        params[i].set_grad(Tensor());
      }) {}

StepInBackward::StepInBackward(std::vector<Tensor> leaves, std::function<void(size_t)> step)
    : leaves_(std::move(leaves)), step_(std::move(step)) {
  for (size_t i = 0; i < leaves_.size(); ++i)
    hooks_.push_back(leaves_[i].register_post_accumulate_grad_hook([this, i](const Tensor&) { on_gradient(i); }));
}

StepInBackward::~StepInBackward() {
  for (size_t i = 0; i < leaves_.size(); ++i) leaves_[i].remove_post_accumulate_grad_hook(hooks_[i]);
}

void StepInBackward::set_mode(Mode mode, Visit before) {
  MG_CHECK(mode != Mode::Measure || before, ValueError,
           "StepInBackward: Mode::Measure needs a function that reads each gradient, got none");
  mode_ = mode;
  before_ = std::move(before);
}

void StepInBackward::on_gradient(size_t i) {
  if (mode_ == Mode::Accumulate) return;
  if (before_) before_(i, leaves_[i]);
  if (mode_ == Mode::Measure)
    leaves_[i].set_grad(Tensor());
  else
    step_(i);
}

}  // namespace mg::optim
