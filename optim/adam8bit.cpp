#include <memgrad/optim/adam8bit.h>

#include <cmath>

#include <memgrad/ops/multi_tensor.h>
#include <memgrad/ops/ops.h>

namespace mg::optim {

using kernels::quant::kBlock;
static_assert(Adam8bit::kBlockSize == kBlock, "Adam8bit::kBlockSize is the kernels' block");

Hyperparameters Adam8bitOptions::to_map() const {
  return {{"lr", lr_},
          {"beta1", beta1_},
          {"beta2", beta2_},
          {"eps", eps_},
          {"weight_decay", weight_decay_},
          {"min_8bit_size", double(min_8bit_size_)}};
}

Adam8bit::Adam8bit(std::vector<ParamGroup> groups, const Adam8bitOptions& options, const char* type)
    : Optimizer(options.to_map(), type) {
  add_param_groups(std::move(groups));
}

bool Adam8bit::quantized(int64_t numel, const Hyperparameters& o) { return double(numel) >= o.at("min_8bit_size"); }

void Adam8bit::check_options(const Hyperparameters& o) const {
  Optimizer::check_options(o);
  const double b1 = o.at("beta1"), b2 = o.at("beta2"), min = o.at("min_8bit_size");
  MG_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1, ValueError, type(), ": expected betas in [0, 1), got ", b1, " and ",
           b2);
  MG_CHECK(o.at("eps") >= 0 && o.at("weight_decay") >= 0, ValueError, type(),
           ": expected eps and weight_decay >= 0, got ", o.at("eps"), " and ", o.at("weight_decay"));
  MG_CHECK(min >= 1 && min <= 0x1p62 && min == std::floor(min), ValueError, type(),
           ": expected min_8bit_size to be a whole number >= 1, got ", min);
}

std::vector<StateSpec> Adam8bit::state_specs(const Tensor& param, const Hyperparameters& o) const {
  const int64_t n = param.numel();
  // A ZeRO slice keeps the form its whole parameter would have (set_slice).
  if (!quantized(whole_numel(param), o))
    return {{"exp_avg", param.shape(), kFloat32, ""}, {"exp_avg_sq", param.shape(), kFloat32, ""}};
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const std::string why = "one float32 absmax per block of " + std::to_string(kBlock) + " of the parameter's " +
                          std::to_string(n) + " elements";
  return {{"exp_avg", param.shape(), kUInt8, ""},
          {"exp_avg_sq", param.shape(), kUInt8, ""},
          {"exp_avg.absmax", {blocks}, kFloat32, why, kBlock},
          {"exp_avg_sq.absmax", {blocks}, kFloat32, why, kBlock}};
}

void Adam8bit::check_state(const std::string& key, const StateSpec& spec, const Tensor& value) const {
  if (spec.name.find(".absmax") == std::string::npos) return;
  const std::vector<float> v = value.to_vector<float>();
  for (size_t b = 0; b < v.size(); ++b)
    MG_CHECK(std::isfinite(v[b]) && v[b] >= 0, ValueError, type(), ".load_state_dict: '", key, "' block ", b,
             ": expected a finite absmax >= 0, got ", v[b]);
}

void Adam8bit::update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) {
  // params, grads, exp_avg, exp_avg_sq, and their absmax (undefined for float32 moments)
  kernels::TensorLists lists(6);
  std::vector<kernels::quant::Adam8bitScalars> scalars;
  for (const ParamUpdate& u : params) {
    const Tensor& p = *u.param;
    const bool q = quantized(whole_numel(p), o);
    lists[0].push_back(p), lists[1].push_back(p.grad());
    lists[2].push_back(state_tensor(*u.state, p, *u.name, "exp_avg"));
    lists[3].push_back(state_tensor(*u.state, p, *u.name, "exp_avg_sq"));
    lists[4].push_back(q ? state_tensor(*u.state, p, *u.name, "exp_avg.absmax") : Tensor());
    lists[5].push_back(q ? state_tensor(*u.state, p, *u.name, "exp_avg_sq.absmax") : Tensor());
    scalars.push_back(
        {o.at("lr"), o.at("beta1"), o.at("beta2"), o.at("eps"), o.at("weight_decay"), ++u.state->step, q});
  }
  detail::adam8bit_update_(type().c_str(), lists, scalars);
}

}  // namespace mg::optim
