#include <memgrad/optim/adam.h>

#include <cmath>

#include <memgrad/kernels/update_rules.h>
#include <memgrad/optim/multi_tensor_impl.h>

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
    : Optimizer({}, options.to_map(), decoupled ? "AdamW" : "Adam"), decoupled_(decoupled) {
  MG_CHECK(options.beta1_ >= 0 && options.beta1_ < 1 && options.beta2_ >= 0 && options.beta2_ < 1, ValueError, type(),
           ": expected betas in [0, 1), got ", options.beta1_, " and ", options.beta2_);
  MG_CHECK(options.eps_ >= 0 && options.weight_decay_ >= 0, ValueError, type(),
           ": expected eps and weight_decay >= 0, got ", options.eps_, " and ", options.weight_decay_);
  for (auto& g : groups) add_param_group(std::move(g));
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
    scalars.push_back({lr, b1, b2, o.at("eps"), o.at("weight_decay"), lr / (1 - std::pow(b1, t)),
                       std::sqrt(1 - std::pow(b2, t)), amsgrad, o.at("maximize") != 0, decoupled_});
  }
  detail::run_update(type().c_str(), &kernels::Backend::adam_update, lists, scalars);
  for (const ParamUpdate& u : params) u.param->storage()->bump_version();
}

}  // namespace mg::optim
