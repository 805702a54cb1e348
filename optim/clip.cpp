#include <memgrad/optim/clip.h>

#include <algorithm>
#include <cmath>

#include <memgrad/core/grad_mode.h>
#include <memgrad/ops/ops.h>

namespace mg::optim {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  return clip_grad_norm_(params, max_norm, norm_type, nullptr);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       const std::function<double(double)>& combine) {
  MG_CHECK(norm_type > 0, ValueError, "clip_grad_norm_: expected a positive norm type, got ", norm_type);
  NoGradGuard ng;
  double total = 0;
  bool meta = false;
  for (auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // One gradient-sized temporary (the sums accumulate in double): no float64 copy. Half gradients
    // are widened first, as their squares could overflow.
    Tensor x = g.dtype() == kFloat16 || g.dtype() == kBFloat16 ? g.to(kFloat32) : g;
    Tensor part = std::isinf(norm_type) ? max(abs(x)) : norm_type == 2.0 ? sum(x * x) : sum(pow(abs(x), norm_type));
    if (part.is_meta()) {  // meta: the temporaries' bytes, no norm and no scaling
      meta = true;
      continue;
    }
    total = std::isinf(norm_type) ? std::max(total, part.item<double>()) : total + part.item<double>();
  }
  if (meta) return 0.0;
  if (combine) total = combine(total);
  if (!std::isinf(norm_type)) total = std::pow(total, 1.0 / norm_type);
  double coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (auto& p : params)
      if (Tensor g = p.grad(); g.defined()) g.mul_(coef);
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  MG_CHECK(clip_value >= 0, ValueError, "clip_grad_value_: expected a non-negative clip value, got ", clip_value);
  NoGradGuard ng;
  for (auto& p : params)
    if (Tensor g = p.grad(); g.defined()) g.clamp_(-clip_value, clip_value);
}

}  // namespace mg::optim
