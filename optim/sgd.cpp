#include <memgrad/optim/sgd.h>

#include <memgrad/ops/multi_tensor.h>

namespace mg::optim {

Hyperparameters SGDOptions::to_map() const {
  return {{"lr", lr_},
          {"momentum", momentum_},
          {"dampening", dampening_},
          {"weight_decay", weight_decay_},
          {"nesterov", nesterov_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options) : Optimizer(options.to_map(), "SGD") {
  add_param_groups(std::move(groups));
}

std::vector<std::string> SGD::state_names(const Hyperparameters& o) const {
  if (o.at("momentum") == 0) return {};
  return {"momentum_buffer"};
}

void SGD::check_options(const Hyperparameters& o) const {
  Optimizer::check_options(o);
  check_flag(o, "nesterov");
  check_flag(o, "maximize");
  MG_CHECK(o.at("momentum") >= 0 && o.at("weight_decay") >= 0, ValueError,
           "SGD: expected momentum and weight_decay >= 0, got ", o.at("momentum"), " and ", o.at("weight_decay"));
  MG_CHECK(o.at("nesterov") == 0 || (o.at("momentum") > 0 && o.at("dampening") == 0), ValueError,
           "SGD: Nesterov momentum requires a momentum > 0 and zero dampening, got momentum ", o.at("momentum"),
           " and dampening ", o.at("dampening"));
}

void SGD::update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) {
  kernels::TensorLists lists(3);  // params, grads, momentum buffers
  std::vector<kernels::rules::SGDScalars> scalars;
  for (const ParamUpdate& u : params) {
    kernels::rules::SGDScalars s{o.at("lr"),
                                 o.at("momentum"),
                                 o.at("dampening"),
                                 o.at("weight_decay"),
                                 o.at("nesterov") != 0,
                                 o.at("maximize") != 0,
                                 u.state->step == 0,
                                 {float(grad_factors().first), float(grad_factors().second)}};
    lists[2].push_back(s.momentum != 0 ? state_tensor(*u.state, *u.param, *u.name, "momentum_buffer") : Tensor());
    ++u.state->step;
    lists[0].push_back(*u.param), lists[1].push_back(u.param->grad());
    scalars.push_back(s);
  }
  mg::detail::sgd_update_("SGD", lists, scalars);
}

}  // namespace mg::optim
