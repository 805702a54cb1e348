// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), with the semantics and
// defaults of lucidrains' lion-pytorch: the update is the sign of an interpolation of the momentum
// and the gradient, so every element moves by exactly lr (before the decoupled weight decay):
//   c = beta1 * m + (1 - beta1) * g;  p *= 1 - lr * wd;  p -= lr * sign(c);  m = beta2 * m + (1 - beta2) * g
// State per parameter: exp_avg (the momentum m, shaped like the parameter): half of Adam's. The
// paper's advice: an lr 3-10x smaller than AdamW's and a weight decay 3-10x larger.
#pragma once
#include <memgrad/optim/optimizer.h>

namespace mg::optim {

struct LionOptions {
  double lr_ = 1e-4, beta1_ = 0.9, beta2_ = 0.99, weight_decay_ = 0;
  bool maximize_ = false;
  LionOptions(double lr = 1e-4) : lr_(lr) {}
  LionOptions& lr(double v) { return lr_ = v, *this; }
  LionOptions& betas(double b1, double b2) { return beta1_ = b1, beta2_ = b2, *this; }
  LionOptions& weight_decay(double v) { return weight_decay_ = v, *this; }  // decoupled: p *= 1 - lr * wd
  LionOptions& maximize(bool v = true) { return maximize_ = v, *this; }
  Hyperparameters to_map() const;
};

class Lion : public Optimizer {
 public:
  Lion(std::vector<ParamGroup> groups, const LionOptions& options = {});
  Lion(const std::vector<Tensor>& params, const LionOptions& options = {}) : Lion(as_groups(params), options) {}
  Lion(const std::vector<std::pair<std::string, Tensor>>& named, const LionOptions& options = {})
      : Lion(as_groups(named), options) {}

 protected:
  void update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) override;
  // betas in [0, 1], weight_decay >= 0.
  void check_options(const Hyperparameters& o) const override;
  std::vector<std::string> state_names(const Hyperparameters& o) const override;  // exp_avg
};

}  // namespace mg::optim
