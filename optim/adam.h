// Adam (optionally AMSGrad) and AdamW, as torch.optim.Adam/AdamW. State per parameter:
// exp_avg and exp_avg_sq (2x the parameter bytes), plus max_exp_avg_sq with amsgrad (3x).
#pragma once
#include <memgrad/optim/optimizer.h>

namespace mg::optim {

struct AdamOptions {
  double lr_ = 1e-3, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
  bool amsgrad_ = false, maximize_ = false;
  AdamOptions(double lr = 1e-3) : lr_(lr) {}
  AdamOptions& lr(double v) { return lr_ = v, *this; }
  AdamOptions& betas(double b1, double b2) { return beta1_ = b1, beta2_ = b2, *this; }
  AdamOptions& eps(double v) { return eps_ = v, *this; }
  AdamOptions& weight_decay(double v) { return weight_decay_ = v, *this; }
  AdamOptions& amsgrad(bool v = true) { return amsgrad_ = v, *this; }
  AdamOptions& maximize(bool v = true) { return maximize_ = v, *this; }
  Hyperparameters to_map() const;
};
// AdamW differs in its decoupled weight decay (p *= 1 - lr * wd) and default decay 1e-2.
struct AdamWOptions : AdamOptions {
  AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { weight_decay_ = 1e-2; }
  AdamWOptions& lr(double v) { return lr_ = v, *this; }
  AdamWOptions& betas(double b1, double b2) { return beta1_ = b1, beta2_ = b2, *this; }
  AdamWOptions& eps(double v) { return eps_ = v, *this; }
  AdamWOptions& weight_decay(double v) { return weight_decay_ = v, *this; }
  AdamWOptions& amsgrad(bool v = true) { return amsgrad_ = v, *this; }
  AdamWOptions& maximize(bool v = true) { return maximize_ = v, *this; }
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options = {}) : Adam(std::move(groups), options, false) {}
  Adam(const std::vector<Tensor>& params, const AdamOptions& options = {}) : Adam(as_groups(params), options) {}
  Adam(const std::vector<std::pair<std::string, Tensor>>& named, const AdamOptions& options = {})
      : Adam(as_groups(named), options) {}

 protected:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled);
  void update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) override;
  // betas in [0, 1), eps and weight_decay >= 0 (as torch).
  void check_options(const Hyperparameters& o) const override;
  std::vector<std::string> state_names(const Hyperparameters& o) const override;
  bool reads_half_grads() const override { return true; }  // its kernel reads them with the factors

 private:
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {}) : Adam(std::move(groups), options, true) {}
  AdamW(const std::vector<Tensor>& params, const AdamWOptions& options = {}) : AdamW(as_groups(params), options) {}
  AdamW(const std::vector<std::pair<std::string, Tensor>>& named, const AdamWOptions& options = {})
      : AdamW(as_groups(named), options) {}
};

}  // namespace mg::optim
