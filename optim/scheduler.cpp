#include <memgrad/optim/scheduler.h>

#include <algorithm>
#include <cmath>

namespace mg::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : opt_(optimizer) {
  for (size_t g = 0; g < opt_.param_groups().size(); ++g) base_lrs_.push_back(opt_.lr(g));
}

void LRScheduler::apply() {
  auto& groups = opt_.param_groups();
  for (size_t g = 0; g < groups.size() && g < base_lrs_.size(); ++g)
    groups[g].options["lr"] = base_lrs_[g] * factor(t_);
}

void LRScheduler::step() {
  ++t_;
  apply();
}

std::vector<double> LRScheduler::last_lr() const {
  std::vector<double> r;
  for (size_t g = 0; g < opt_.param_groups().size(); ++g) r.push_back(opt_.lr(g));
  return r;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size(step_size), gamma(gamma) {
  MG_CHECK(step_size > 0, ValueError, "StepLR: expected step_size > 0, got ", step_size);
  apply();
}
double StepLR::factor(int64_t t) const { return std::pow(gamma, double(t / step_size)); }

LinearWarmupLR::LinearWarmupLR(Optimizer& optimizer, int64_t warmup_steps)
    : LRScheduler(optimizer), warmup_steps(warmup_steps) {
  MG_CHECK(warmup_steps > 0, ValueError, "LinearWarmupLR: expected warmup_steps > 0, got ", warmup_steps);
  apply();
}
double LinearWarmupLR::factor(int64_t t) const { return std::min(1.0, double(t + 1) / double(warmup_steps)); }

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor)
    : LRScheduler(optimizer), warmup_steps(warmup_steps), total_steps(total_steps), min_factor(min_factor) {
  MG_CHECK(warmup_steps >= 0 && total_steps > warmup_steps, ValueError,
           "WarmupCosineLR: expected 0 <= warmup_steps < total_steps, got ", warmup_steps, " and ", total_steps);
  apply();
}
double WarmupCosineLR::factor(int64_t t) const {
  if (t < warmup_steps) return double(t + 1) / double(warmup_steps);
  if (t >= total_steps) return min_factor;
  double ratio = double(t - warmup_steps) / double(total_steps - warmup_steps);
  return min_factor + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (1.0 - min_factor);
}

}  // namespace mg::optim
