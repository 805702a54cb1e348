// Dynamic loss scaling with the semantics and defaults of PyTorch (>= 2.1): the loss is multiplied
// by a scale (initially 2^16) so small float16 gradients do not underflow; gradients are divided
// by it before the optimizer step, which is skipped when any gradient is inf or NaN; the scale
// halves after such a step and doubles after growth_interval (2000) clean steps. The scale is a
// float32, as PyTorch's: growth that would overflow it to inf is not taken (with the default
// factor it stops at 2^127), so a long clean run never reaches an infinite scale and never
// alternates skipping and backing off. bfloat16 has float32's exponent range and needs no scaler.
//
//   GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.step(opt);      // unscale_ (if not done yet), skip on inf/NaN, else opt.step()
//   scaler.update();
//
// Unlike PyTorch it also accepts half gradients: with MasterWeights, pass them to unscale_/step;
// the half gradients are checked for inf/NaN and the optimizer reads them, times 1/scale, into the
// float32 masters' step (MasterWeights::step: no float32 copy of the gradients).
#pragma once
#include <map>
#include <string>

#include <memgrad/amp/master_weights.h>
#include <memgrad/optim/optimizer.h>

namespace mg::amp {

struct GradScalerOptions {
  double init_scale_ = 65536.0, growth_factor_ = 2.0, backoff_factor_ = 0.5;
  int64_t growth_interval_ = 2000;
  bool dynamic_ = true;  // false: a static scale that never changes (steps are still skipped on inf)
  bool enabled_ = true;  // false: scale() and unscale_ do nothing, step() just steps
  GradScalerOptions& init_scale(double v) { return init_scale_ = v, *this; }
  GradScalerOptions& growth_factor(double v) { return growth_factor_ = v, *this; }
  GradScalerOptions& backoff_factor(double v) { return backoff_factor_ = v, *this; }
  GradScalerOptions& growth_interval(int64_t v) { return growth_interval_ = v, *this; }
  GradScalerOptions& dynamic(bool v) { return dynamic_ = v, *this; }
  GradScalerOptions& enabled(bool v) { return enabled_ = v, *this; }
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});

  Tensor scale(const Tensor& loss) const;  // loss * scale
  // Divides the gradients of opt's parameters by the scale, in place, and records whether any is
  // inf/NaN: one fused pass per device (one launch per batch of gradients on CUDA) and one read of
  // a flag. Once per step: a second call before update() raises ValueError.
  void unscale_(optim::Optimizer& opt);
  // The same for half model gradients: checks them and gives them to the masters (opt's parameters)
  // with 1/scale as the factor the step reads them with (MasterWeights::use_model_grads); clip
  // them with MasterWeights::clip_grad_norm_.
  void unscale_(optim::Optimizer& opt, MasterWeights& masters);
  // Steps unless an inf/NaN was found; returns whether it stepped. With masters, the model's half
  // parameters are refreshed from the updated masters.
  bool step(optim::Optimizer& opt);
  bool step(optim::Optimizer& opt, MasterWeights& masters);
  // Adjusts the scale from this step's outcome and re-arms unscale_.
  void update();

  // Stepping inside backward (optim::StepInBackward), where the gradients exist one at a time and
  // step() is not called: unscale_grad_ divides one gradient by the scale in place as unscale_ does
  // and returns whether it holds inf/NaN (nothing when disabled); record_unscaled(found) then records
  // the step's outcome as unscale_ would and returns whether to step (a skipped step is counted, as
  // step() counts it). update() follows as usual.
  bool unscale_grad_(const Tensor& grad) const;
  bool record_unscaled(bool found_inf);
  double inverse_scale() const;  // what unscale_ multiplies by: 1 / scale in float32 (1 when disabled)

  // Data parallelism where each process unscales only its slice of the gradients: records whether
  // any other process found inf/NaN in its slice this step, so that every process skips the same
  // steps (call between unscale_ and step; distributed::DataParallel::any_rank combines the flags).
  void merge_found_inf(bool found_elsewhere) { found_inf_ = found_inf_ || found_elsewhere; }

  double get_scale() const { return scale_; }  // a float32 value
  int64_t growth_tracker() const { return growth_tracker_; }
  bool found_inf() const { return found_inf_; }
  int64_t skipped_steps() const { return skipped_; }

  std::map<std::string, double> state_dict() const;  // scale, growth_factor, ..., _growth_tracker
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  GradScalerOptions o_;
  float scale_;
  int64_t growth_tracker_ = 0, skipped_ = 0;
  bool unscaled_ = false, found_inf_ = false;
};

// True when any element of any tensor is inf or NaN.
bool any_non_finite(const std::vector<Tensor>& tensors);

}  // namespace mg::amp
