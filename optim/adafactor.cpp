#include <memgrad/optim/adafactor.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <memgrad/ops/multi_tensor.h>

namespace mg::optim {

Hyperparameters AdafactorOptions::to_map() const {
  return {{"lr", lr_}, {"beta2_decay", beta2_decay_},   {"eps1", eps1_},   {"eps2", eps2_},
          {"d", d_},   {"weight_decay", weight_decay_}, {"beta1", beta1_}, {"maximize", maximize_ ? 1.0 : 0.0}};
}

Adafactor::Adafactor(std::vector<ParamGroup> groups, const AdafactorOptions& options)
    : Optimizer(options.to_map(), "Adafactor") {
  add_param_groups(std::move(groups));
}

void Adafactor::check_options(const Hyperparameters& o) const {
  Optimizer::check_options(o);
  check_flag(o, "maximize");
  MG_CHECK(o.at("beta2_decay") <= 0, ValueError, "Adafactor: expected beta2_decay <= 0, got ", o.at("beta2_decay"));
  MG_CHECK(o.at("eps1") >= 0 || o.at("eps1") == -1, ValueError,
           "Adafactor: expected eps1 >= 0 (or -1: the parameter dtype's epsilon), got ", o.at("eps1"));
  MG_CHECK(o.at("eps2") >= 0, ValueError, "Adafactor: expected eps2 >= 0, got ", o.at("eps2"));
  MG_CHECK(o.at("d") >= 1, ValueError, "Adafactor: expected a clipping threshold d >= 1, got ", o.at("d"));
  MG_CHECK(o.at("weight_decay") >= 0, ValueError, "Adafactor: expected weight_decay >= 0, got ", o.at("weight_decay"));
  MG_CHECK(o.at("beta1") >= 0 && o.at("beta1") < 1, ValueError, "Adafactor: expected beta1 in [0, 1), got ",
           o.at("beta1"));
}

std::vector<StateSpec> Adafactor::state_specs(const Tensor& param, const Hyperparameters& o) const {
  std::vector<StateSpec> specs;
  const DType t = param.dtype();
  if (param.dim() > 1) {
    Shape row = param.shape(), col = param.shape();
    row.back() = 1, col[col.size() - 2] = 1;
    specs.push_back({"row_var", row, t, "the parameter's shape with its last dim 1: one factor per row"});
    specs.push_back({"col_var", col, t, "the parameter's shape with its next-to-last dim 1: one factor per column"});
  } else {
    specs.push_back({"variance", param.shape(), t, ""});
  }
  if (o.at("beta1") > 0) specs.push_back({"exp_avg", param.shape(), t, ""});
  return specs;
}

void Adafactor::check_state(const std::string& key, const StateSpec& spec, const Tensor& value) const {
  if (spec.name == "exp_avg") return;
  for (double v : value.to_vector<double>())
    MG_CHECK(std::isfinite(v) && v >= 0, ValueError, "Adafactor.load_state_dict: '", key,
             "': expected finite second-moment factors >= 0, got ", v);
}

namespace {
double machine_epsilon(DType t) {
  switch (t) {
    case kFloat16:
      return 0.0009765625;  // 2^-10
    case kBFloat16:
      return 0.0078125;  // 2^-7
    case kFloat64:
      return std::numeric_limits<double>::epsilon();
    default:
      return std::numeric_limits<float>::epsilon();
  }
}
}  // namespace

void Adafactor::update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) {
  const bool momentum = o.at("beta1") > 0;
  kernels::TensorLists lists(5);  // params, grads, row_var (variance), col_var, exp_avg
  std::vector<kernels::adafactor::Scalars> scalars;
  for (const ParamUpdate& u : params) {
    const Tensor& p = *u.param;
    const bool factored = p.dim() > 1;
    lists[0].push_back(p), lists[1].push_back(p.grad());
    lists[2].push_back(state_tensor(*u.state, p, *u.name, factored ? "row_var" : "variance"));
    lists[3].push_back(factored ? state_tensor(*u.state, p, *u.name, "col_var") : Tensor());
    lists[4].push_back(momentum ? state_tensor(*u.state, p, *u.name, "exp_avg") : Tensor());
    const double t = double(++u.state->step), lr = o.at("lr");
    kernels::adafactor::Scalars s{};
    s.lr = lr, s.rho = std::min(lr, 1 / std::sqrt(t)), s.weight = std::pow(t, o.at("beta2_decay"));
    s.eps1 = o.at("eps1") < 0 ? machine_epsilon(p.dtype()) : o.at("eps1");
    s.eps2 = o.at("eps2"), s.d = o.at("d"), s.weight_decay = o.at("weight_decay"), s.beta1 = o.at("beta1");
    s.maximize = o.at("maximize") != 0;
    if (factored) s.rows = p.size(-2), s.cols = p.size(-1);
    scalars.push_back(s);
  }
  detail::adafactor_update_(lists, scalars);
}

}  // namespace mg::optim
