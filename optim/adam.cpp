#include <memgrad/optim/adam.h>

#include <cmath>

#include <memgrad/ops/multi_tensor.h>

namespace mg::optim {

Hyperparameters AdamOptions::to_map() const {
  return {{"lr", lr_},
          {"beta1", beta1_},
          {"beta2", beta2_},
          {"eps", eps_},
          {"weight_decay", weight_decay_},
          {"amsgrad", amsgrad_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled)
    : Optimizer(options.to_map(), decoupled ? "AdamW" : "Adam"), decoupled_(decoupled) {
  add_param_groups(std::move(groups));
}

std::vector<std::string> Adam::state_names(const Hyperparameters& o) const {
  if (o.at("amsgrad") != 0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::check_options(const Hyperparameters& o) const {
  Optimizer::check_options(o);
  check_flag(o, "amsgrad");
  check_flag(o, "maximize");
  const double b1 = o.at("beta1"), b2 = o.at("beta2");
  MG_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1, ValueError, type(), ": expected betas in [0, 1), got ", b1, " and ",
           b2);
  MG_CHECK(o.at("eps") >= 0 && o.at("weight_decay") >= 0, ValueError, type(),
           ": expected eps and weight_decay >= 0, got ", o.at("eps"), " and ", o.at("weight_decay"));
}

void Adam::update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) {
  const bool amsgrad = o.at("amsgrad") != 0;
  const double lr = o.at("lr"), b1 = o.at("beta1"), b2 = o.at("beta2");
  kernels::TensorLists lists(5);  // params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq
  std::vector<kernels::rules::AdamScalars> scalars;
  for (const ParamUpdate& u : params) {
    const Tensor& param = *u.param;
    lists[0].push_back(param), lists[1].push_back(param.grad());
    lists[2].push_back(state_tensor(*u.state, param, *u.name, "exp_avg"));
    lists[3].push_back(state_tensor(*u.state, param, *u.name, "exp_avg_sq"));
    lists[4].push_back(amsgrad ? state_tensor(*u.state, param, *u.name, "max_exp_avg_sq") : Tensor());
    const double t = double(++u.state->step);
    scalars.push_back({lr,
                       b1,
                       b2,
                       o.at("eps"),
                       o.at("weight_decay"),
                       lr / (1 - std::pow(b1, t)),
                       std::sqrt(1 - std::pow(b2, t)),
                       amsgrad,
                       o.at("maximize") != 0,
                       decoupled_,
                       {float(grad_factors().first), float(grad_factors().second)}});
  }
  mg::detail::adam_update_(type().c_str(), lists, scalars);
}

}  // namespace mg::optim
