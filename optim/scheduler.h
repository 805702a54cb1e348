// Learning-rate schedulers. Each multiplies every group's initial lr by factor(t), where t counts
// step() calls (0 right after construction, which already applies factor(0)), as PyTorch's.
#pragma once
#include <vector>

#include <memgrad/optim/optimizer.h>

namespace mg::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  void step();  // advances t and sets the lrs
  int64_t last_step() const { return t_; }
  std::vector<double> last_lr() const;
  virtual double factor(int64_t t) const = 0;

 protected:
  void apply();  // call at the end of a derived constructor

 private:
  Optimizer& opt_;
  std::vector<double> base_lrs_;
  int64_t t_ = 0;
};

// lr * gamma^floor(t / step_size), as torch.optim.lr_scheduler.StepLR.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double factor(int64_t t) const override;
  int64_t step_size;
  double gamma;
};

// Linear warmup from lr / warmup_steps to lr over the first warmup_steps: (t + 1) / warmup_steps.
class LinearWarmupLR : public LRScheduler {
 public:
  LinearWarmupLR(Optimizer& optimizer, int64_t warmup_steps);
  double factor(int64_t t) const override;
  int64_t warmup_steps;
};

// Linear warmup, then a cosine decay from lr to min_factor * lr at total_steps (held after).
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_factor = 0.0);
  double factor(int64_t t) const override;
  int64_t warmup_steps, total_steps;
  double min_factor;
};

}  // namespace mg::optim
