#include <memgrad/optim/sgd.h>

#include <memgrad/optim/foreach_impl.h>
#include <memgrad/optim/update_rules.h>

namespace mg::optim {

Hyperparameters SGDOptions::to_map() const {
  return {{"lr", lr_},
          {"momentum", momentum_},
          {"dampening", dampening_},
          {"weight_decay", weight_decay_},
          {"nesterov", nesterov_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options) : Optimizer({}, options.to_map(), "SGD") {
  MG_CHECK(options.momentum_ >= 0 && options.weight_decay_ >= 0, ValueError,
           "SGD: expected momentum and weight_decay >= 0, got ", options.momentum_, " and ", options.weight_decay_);
  MG_CHECK(!options.nesterov_ || (options.momentum_ > 0 && options.dampening_ == 0), ValueError,
           "SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
  for (auto& g : groups) add_param_group(std::move(g));
}

void SGD::update(const Hyperparameters& o, const Tensor& param, const std::string& name, ParamState& state) {
  rules::SGDScalars s{o.at("lr"),           o.at("momentum"),      o.at("dampening"),
                      o.at("weight_decay"), o.at("nesterov") != 0, o.at("maximize") != 0,
                      state.step == 0};
  Tensor buf = s.momentum != 0 ? state_tensor(state, param, name, "momentum_buffer") : Tensor();
  ++state.step;
  detail::for_each_element("SGD", {param, param.grad(), buf}, [&](auto p, int64_t i) {
    using T = std::decay_t<decltype(*p[0])>;
    using A = cpu::opmath_t<T>;
    A x = cpu::load(p[0][i]), b = p[2] ? cpu::load(p[2][i]) : A(0);
    rules::sgd<A>(x, cpu::load(p[1][i]), b, s);
    p[0][i] = cpu::store<T>(x);
    if (p[2]) p[2][i] = cpu::store<T>(b);
  });
  param.storage()->bump_version();
}

}  // namespace mg::optim
