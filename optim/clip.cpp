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
  GradNormClipper clipper(max_norm, norm_type);
  bool meta = false;
  for (size_t i = 0; i < params.size(); ++i)
    if (Tensor g = params[i].grad(); g.defined()) clipper.add(i, g), meta |= g.is_meta();
  if (meta) return 0.0;  // meta: the temporaries' bytes, no norm and no scaling
  const double partial = combine ? combine(clipper.partial()) : clipper.partial();
  const double coef = clipper.coefficient(partial);
  for (auto& p : params)
    if (Tensor g = p.grad(); g.defined()) GradNormClipper::clip(g, coef);
  return clipper.total_norm(partial);
}

GradNormClipper::GradNormClipper(double max_norm, double norm_type) : max_norm_(max_norm), norm_type_(norm_type) {
  MG_CHECK(norm_type > 0, ValueError, "clip_grad_norm_: expected a positive norm type, got ", norm_type);
}

void GradNormClipper::add(size_t i, const Tensor& g, double scale) {
  NoGradGuard ng;
  // One gradient-sized temporary (the sums accumulate in double): no float64 copy. Half gradients
  // are widened first, as their squares could overflow.
  Tensor x = g.dtype() == kFloat16 || g.dtype() == kBFloat16 ? g.to(kFloat32) : g;
  if (scale != 1.0) x = x * scale;
  Tensor part = std::isinf(norm_type_) ? max(abs(x)) : norm_type_ == 2.0 ? sum(x * x) : sum(pow(abs(x), norm_type_));
  if (parts_.size() <= i) parts_.resize(i + 1, 0.0);
  parts_[i] = part.is_meta() ? 0.0 : part.item<double>();
}

double GradNormClipper::partial() const {
  double total = 0;
  for (double p : parts_) total = std::isinf(norm_type_) ? std::max(total, p) : total + p;
  return total;
}

double GradNormClipper::total_norm(double partial) const {
  return std::isinf(norm_type_) ? partial : std::pow(partial, 1.0 / norm_type_);
}

double GradNormClipper::coefficient(double partial) const { return max_norm_ / (total_norm(partial) + 1e-6); }

void GradNormClipper::clip(Tensor g, double coef) {
  NoGradGuard ng;
  if (coef < 1) g.mul_(coef);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  MG_CHECK(clip_value >= 0, ValueError, "clip_grad_value_: expected a non-negative clip value, got ", clip_value);
  NoGradGuard ng;
  for (auto& p : params)
    if (Tensor g = p.grad(); g.defined()) g.clamp_(-clip_value, clip_value);
}

}  // namespace mg::optim
