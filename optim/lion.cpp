#include <memgrad/optim/lion.h>

#include <memgrad/ops/multi_tensor.h>

namespace mg::optim {

Hyperparameters LionOptions::to_map() const {
  return {{"lr", lr_},
          {"beta1", beta1_},
          {"beta2", beta2_},
          {"weight_decay", weight_decay_},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

Lion::Lion(std::vector<ParamGroup> groups, const LionOptions& options) : Optimizer(options.to_map(), "Lion") {
  add_param_groups(std::move(groups));
}

std::vector<std::string> Lion::state_names(const Hyperparameters&) const { return {"exp_avg"}; }

void Lion::check_options(const Hyperparameters& o) const {
  Optimizer::check_options(o);
  check_flag(o, "maximize");
  const double b1 = o.at("beta1"), b2 = o.at("beta2");
  MG_CHECK(b1 >= 0 && b1 <= 1 && b2 >= 0 && b2 <= 1, ValueError, "Lion: expected betas in [0, 1], got ", b1, " and ",
           b2);
  MG_CHECK(o.at("weight_decay") >= 0, ValueError, "Lion: expected weight_decay >= 0, got ", o.at("weight_decay"));
}

void Lion::update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) {
  kernels::TensorLists lists(3);  // params, grads, exp_avg
  std::vector<kernels::rules::LionScalars> scalars;
  const kernels::rules::LionScalars s{o.at("lr"), o.at("beta1"), o.at("beta2"), o.at("weight_decay"),
                                      o.at("maximize") != 0};
  for (const ParamUpdate& u : params) {
    lists[0].push_back(*u.param), lists[1].push_back(u.param->grad());
    lists[2].push_back(state_tensor(*u.state, *u.param, *u.name, "exp_avg"));
    ++u.state->step;
    scalars.push_back(s);
  }
  mg::detail::lion_update_(lists, scalars);
}

}  // namespace mg::optim
