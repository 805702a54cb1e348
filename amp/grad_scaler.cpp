#include <memgrad/amp/grad_scaler.h>

#include <cmath>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/memory.h>
#include <memgrad/ops/multi_tensor.h>
#include <memgrad/ops/ops.h>

namespace mg::amp {

GradScaler::GradScaler(const GradScalerOptions& o) : o_(o), scale_(float(o.init_scale_)) {
  MG_CHECK(o.init_scale_ > 0 && std::isfinite(float(o.init_scale_)), ValueError,
           "GradScaler: expected a positive init_scale within float32's range, got ", o.init_scale_);
  MG_CHECK(o.growth_factor_ > 1, ValueError, "GradScaler: expected growth_factor > 1, got ", o.growth_factor_);
  MG_CHECK(o.backoff_factor_ > 0 && o.backoff_factor_ < 1, ValueError,
           "GradScaler: expected backoff_factor in (0, 1), got ", o.backoff_factor_);
  MG_CHECK(o.growth_interval_ > 0, ValueError, "GradScaler: expected a positive growth_interval, got ",
           o.growth_interval_);
}

Tensor GradScaler::scale(const Tensor& loss) const { return o_.enabled_ ? loss * scale_ : loss; }

namespace {
// Looks for inf/NaN in every floating tensor and, unless inv_scale == 1, multiplies them by
// inv_scale in place (as t.mul_(inv_scale)): one fused pass per device, one read of a flag.
bool check_and_unscale(const std::vector<Tensor>& tensors, double inv_scale) {
  NoGradGuard ng;
  bool found = false;
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;  // contiguous tensors per device
  for (Tensor t : tensors) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    if (!t.is_contiguous()) {  // a view: check a contiguous copy, scale through the view
      found |= check_and_unscale({t.contiguous()}, 1.0);
      if (inv_scale != 1.0) t.mul_(inv_scale);
      continue;
    }
    auto it = by_device.begin();
    while (it != by_device.end() && it->first != t.device()) ++it;
    if (it == by_device.end()) it = by_device.insert(it, {t.device(), {}});
    it->second.push_back(t);
  }
  for (auto& [device, list] : by_device) {
    Tensor flag;
    {
      MemoryScope scope(Category::Temporary, "GradScaler.found_inf");
      flag = zeros({1}, TensorOptions(kFloat32).device(device));
    }
    mg::detail::non_finite_check_and_unscale_(list, flag, inv_scale);
    if (!device.is_meta()) found |= flag.item<float>() != 0;  // meta: the flag's bytes, no values
  }
  return found;
}
}  // namespace

bool any_non_finite(const std::vector<Tensor>& tensors) { return check_and_unscale(tensors, 1.0); }

namespace {
// 1 / scale rounded to float32, as PyTorch's scale.double().reciprocal().float().
double inverse(float scale) { return double(float(1.0 / double(scale))); }
}  // namespace

namespace {
std::vector<Tensor> grads_of(optim::Optimizer& opt) {
  std::vector<Tensor> g;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params)
      if (p.grad().defined()) g.push_back(p.grad());
  return g;
}
}  // namespace

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!o_.enabled_) return;
  MG_CHECK(!unscaled_, ValueError, "GradScaler.unscale_: expected one call per step, got a second before update()");
  unscaled_ = true;
  found_inf_ = check_and_unscale(grads_of(opt), inverse(scale_));
}

void GradScaler::unscale_(optim::Optimizer& opt, MasterWeights& masters) {
  if (!o_.enabled_) return masters.use_model_grads(1.0);
  MG_CHECK(!unscaled_, ValueError, "GradScaler.unscale_: expected one call per step, got a second before update()");
  unscaled_ = true;
  std::vector<Tensor> half_grads;
  for (auto& p : masters.model_parameters()) half_grads.push_back(p.grad());
  found_inf_ = any_non_finite(half_grads);
  // Dividing in half precision could underflow: the step widens each gradient to float32 as it reads
  // it, then multiplies by 1/scale (no float32 copy of the gradients).
  masters.use_model_grads(inverse(scale_));
  (void)opt;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!o_.enabled_) return opt.step(), true;
  if (!unscaled_) unscale_(opt);
  if (found_inf_) return ++skipped_, false;
  opt.step();
  return true;
}

bool GradScaler::step(optim::Optimizer& opt, MasterWeights& masters) {
  if (!unscaled_) unscale_(opt, masters);
  if (o_.enabled_ && found_inf_) {
    ++skipped_;
    masters.drop_grads();
    return false;
  }
  masters.step(opt);
  return true;
}

bool GradScaler::unscale_grad_(const Tensor& grad) const {
  return o_.enabled_ && check_and_unscale({grad}, inverse(scale_));
}

bool GradScaler::record_unscaled(bool found) {
  if (!o_.enabled_) return true;
  MG_CHECK(!unscaled_, ValueError,
           "GradScaler.record_unscaled: expected one call per step, got a second before update()");
  unscaled_ = true, found_inf_ = found;
  if (found) ++skipped_;
  return !found;
}

double GradScaler::inverse_scale() const { return o_.enabled_ ? inverse(scale_) : 1.0; }

void GradScaler::update() {
  if (!o_.enabled_) return;
  if (o_.dynamic_) {  // PyTorch's _amp_update_scale_, in float32
    if (found_inf_) {
      scale_ = float(scale_ * o_.backoff_factor_);
      growth_tracker_ = 0;
    } else if (++growth_tracker_ == o_.growth_interval_) {
      const float grown = float(scale_ * o_.growth_factor_);
      if (std::isfinite(grown)) scale_ = grown;  // never grow to inf
      growth_tracker_ = 0;
    }
  }
  unscaled_ = false;
  found_inf_ = false;
}

std::map<std::string, double> GradScaler::state_dict() const {
  return {{"scale", scale_},
          {"growth_factor", o_.growth_factor_},
          {"backoff_factor", o_.backoff_factor_},
          {"growth_interval", double(o_.growth_interval_)},
          {"_growth_tracker", double(growth_tracker_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& s) {
  for (const char* k : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    MG_CHECK(s.count(k), ValueError, "GradScaler.load_state_dict: expected key '", k, "', got a dict without it");
  // Counts are whole numbers, checked before the cast (a double such as 1e30 has no int64 value).
  auto count = [&](const char* k, double lo, double below) {
    const double v = s.at(k);
    MG_CHECK(v >= lo && v < below && v == std::floor(v), ValueError, "GradScaler.load_state_dict: expected ", k,
             " to be a whole number in [", lo, ", ", below, "), got ", v);
    return int64_t(v);
  };
  GradScalerOptions o = o_;
  o.growth_factor(s.at("growth_factor")).backoff_factor(s.at("backoff_factor"));
  o.growth_interval(count("growth_interval", 1, 0x1p62));
  const int64_t tracker = count("_growth_tracker", 0, double(o.growth_interval_));
  GradScaler check(o.init_scale(s.at("scale")));  // the constructor's checks, before changing anything
  o_ = o;
  scale_ = float(s.at("scale"));
  growth_tracker_ = tracker;
}

}  // namespace mg::amp
