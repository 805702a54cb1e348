// Adafactor (Shazeer & Stern 2018) with the semantics and defaults of torch.optim.Adafactor
// (PyTorch 2.5+), plus the paper's optional first moment. Its second moment of a matrix [R, C] is
// factored into a row vector and a column vector, so the state costs O(R + C) instead of O(R C):
// GPT-2-124M's 124M parameters keep about 0.23M floats of state. The step is relative to the
// parameter's scale (alpha = max(eps2, RMS(p)) * min(lr, 1 / sqrt(t))), the update is clipped to an
// RMS of at most d, and beta2 rises with the step (1 - beta2_t = t^beta2_decay).
// kernels/adafactor.h has the formulas.
//
// State per parameter (in the parameter's dtype), as torch names it: row_var [..., R, 1] and col_var
// [..., 1, C] for a parameter [..., R, C] (its last two dims factored), or variance (the parameter's
// shape) for a vector; exp_avg (the parameter's shape) when beta1 > 0. Everything is per parameter,
// so train::Trainer refuses it under ZeRO stages 1-2, whose ranks step flat slices.
//
// To match torch's semantics exactly, the parameter's RMS for the relative step is taken before the
// weight decay, eps1 unset (-1) means the parameter dtype's epsilon, and the lerp is torch's.
#pragma once
#include <memgrad/optim/optimizer.h>

namespace mg::optim {

struct AdafactorOptions {
  double lr_ = 1e-2, beta2_decay_ = -0.8, eps1_ = -1, eps2_ = 1e-3, d_ = 1, weight_decay_ = 0, beta1_ = 0;
  bool maximize_ = false;
  AdafactorOptions(double lr = 1e-2) : lr_(lr) {}
  // The largest relative step: rho_t = min(lr, 1 / sqrt(t)).
  AdafactorOptions& lr(double v) { return lr_ = v, *this; }
  // tau <= 0: 1 - beta2_t = t^tau.
  AdafactorOptions& beta2_decay(double v) { return beta2_decay_ = v, *this; }
  // eps1 >= 0 bounds the variance estimate from below (as eps1^2); -1 (torch's None, the default)
  // takes the parameter dtype's machine epsilon. eps2 >= 0 bounds RMS(p) in the relative step.
  AdafactorOptions& eps(double eps1, double eps2) { return eps1_ = eps1, eps2_ = eps2, *this; }
  AdafactorOptions& d(double v) { return d_ = v, *this; }                        // update clipping threshold, >= 1
  AdafactorOptions& weight_decay(double v) { return weight_decay_ = v, *this; }  // p *= 1 - lr * wd
  // The paper's first moment of the clipped update (0: none, torch's Adafactor), in [0, 1).
  AdafactorOptions& beta1(double v) { return beta1_ = v, *this; }
  AdafactorOptions& maximize(bool v = true) { return maximize_ = v, *this; }
  Hyperparameters to_map() const;
};

class Adafactor : public Optimizer {
 public:
  Adafactor(std::vector<ParamGroup> groups, const AdafactorOptions& options = {});
  Adafactor(const std::vector<Tensor>& params, const AdafactorOptions& options = {})
      : Adafactor(as_groups(params), options) {}
  Adafactor(const std::vector<std::pair<std::string, Tensor>>& named, const AdafactorOptions& options = {})
      : Adafactor(as_groups(named), options) {}

 protected:
  void update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) override;
  // lr, eps2 and weight_decay >= 0, beta2_decay <= 0, d >= 1, eps1 >= 0 or -1, beta1 in [0, 1).
  void check_options(const Hyperparameters& o) const override;
  std::vector<StateSpec> state_specs(const Tensor& param, const Hyperparameters& o) const override;
  // The second moment's factors are finite and >= 0.
  void check_state(const std::string& key, const StateSpec& spec, const Tensor& value) const override;
};

}  // namespace mg::optim
