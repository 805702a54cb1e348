// Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay, as
// torch.optim.SGD. State: one momentum buffer per parameter when momentum != 0.
#pragma once
#include <memgrad/optim/optimizer.h>

namespace mg::optim {

struct SGDOptions {
  double lr_ = 1e-3, momentum_ = 0, dampening_ = 0, weight_decay_ = 0;
  bool nesterov_ = false, maximize_ = false;
  SGDOptions(double lr = 1e-3) : lr_(lr) {}
  SGDOptions& lr(double v) { return lr_ = v, *this; }
  SGDOptions& momentum(double v) { return momentum_ = v, *this; }
  SGDOptions& dampening(double v) { return dampening_ = v, *this; }
  SGDOptions& weight_decay(double v) { return weight_decay_ = v, *this; }
  SGDOptions& nesterov(bool v = true) { return nesterov_ = v, *this; }
  SGDOptions& maximize(bool v = true) { return maximize_ = v, *this; }
  Hyperparameters to_map() const;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options = {});
  SGD(const std::vector<Tensor>& params, const SGDOptions& options = {}) : SGD(as_groups(params), options) {}
  SGD(const std::vector<std::pair<std::string, Tensor>>& named, const SGDOptions& options = {})
      : SGD(as_groups(named), options) {}

 protected:
  void update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) override;
  // momentum and weight_decay >= 0; Nesterov needs momentum > 0 and no dampening (as torch).
  void check_options(const Hyperparameters& o) const override;
  std::vector<std::string> state_names(const Hyperparameters& o) const override;  // momentum_buffer with momentum
  bool reads_half_grads() const override { return true; }  // its kernel reads them with the factors
};

}  // namespace mg::optim
