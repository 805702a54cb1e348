#include <memgrad/optim/adam.h>

#include <cmath>

#include <memgrad/optim/foreach_impl.h>
#include <memgrad/optim/update_rules.h>

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

void Adam::update(const Hyperparameters& o, const Tensor& param, const std::string& name, ParamState& state) {
  const bool amsgrad = o.at("amsgrad") != 0;
  Tensor m = state_tensor(state, param, name, "exp_avg"), v = state_tensor(state, param, name, "exp_avg_sq");
  Tensor vmax = amsgrad ? state_tensor(state, param, name, "max_exp_avg_sq") : Tensor();
  const double t = double(++state.step), lr = o.at("lr"), b1 = o.at("beta1"), b2 = o.at("beta2");
  rules::AdamScalars s{lr,
                       b1,
                       b2,
                       o.at("eps"),
                       o.at("weight_decay"),
                       lr / (1 - std::pow(b1, t)),
                       std::sqrt(1 - std::pow(b2, t)),
                       amsgrad,
                       o.at("maximize") != 0,
                       decoupled_};
  detail::for_each_element(type().c_str(), {param, param.grad(), m, v, vmax}, [&](auto p, int64_t i) {
    using T = std::decay_t<decltype(*p[0])>;
    using A = cpu::opmath_t<T>;
    A x = cpu::load(p[0][i]), mi = cpu::load(p[2][i]), vi = cpu::load(p[3][i]), wi = p[4] ? cpu::load(p[4][i]) : A(0);
    rules::adam<A>(x, cpu::load(p[1][i]), mi, vi, wi, s);
    p[0][i] = cpu::store<T>(x), p[2][i] = cpu::store<T>(mi), p[3][i] = cpu::store<T>(vi);
    if (p[4]) p[4][i] = cpu::store<T>(wi);
  });
  param.storage()->bump_version();
}

}  // namespace mg::optim
