#include <memgrad/amp/master_weights.h>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/memory.h>
#include <memgrad/ops/ops.h>
#include <memgrad/optim/clip.h>

namespace mg::amp {

MasterWeights::MasterWeights(const std::vector<std::pair<std::string, Tensor>>& named) {
  NoGradGuard ng;
  for (auto& [name, p] : named) {
    MG_CHECK(is_floating(p.dtype()), DTypeError, "MasterWeights: expected floating parameters, got ", p.dtype(),
             " for ", name);
    MemoryScope scope(Category::OptimizerState, name + ".master");
    Tensor m = p.to(kFloat32);
    if (m.is_same(p)) m = p.clone();
    m.storage()->set_category(Category::OptimizerState);
    params_.push_back(p);
    masters_.push_back(m.requires_grad_(true));
    names_.push_back(name);
  }
}

namespace {
std::vector<std::pair<std::string, Tensor>> anonymous(const std::vector<Tensor>& ps) {
  std::vector<std::pair<std::string, Tensor>> r;
  for (size_t i = 0; i < ps.size(); ++i) r.emplace_back("param" + std::to_string(i), ps[i]);
  return r;
}
}  // namespace

MasterWeights::MasterWeights(const std::vector<Tensor>& params) : MasterWeights(anonymous(params)) {}

std::vector<std::pair<std::string, Tensor>> MasterWeights::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> r;
  for (size_t i = 0; i < masters_.size(); ++i) r.emplace_back(names_[i], masters_[i]);
  return r;
}

void MasterWeights::grads_to_masters(double scale) {
  for (size_t i = 0; i < params_.size(); ++i) grad_to_master(i, scale);
  scale_ = coef_ = 1.0;  // the copies hold the scaled values
}

void MasterWeights::grad_to_master(size_t i, double scale) {
  NoGradGuard ng;
  Tensor g = params_.at(i).grad();
  if (!g.defined()) return;
  MemoryScope scope(Category::Gradient, names_[i] + ".master");
  Tensor m = g.to(kFloat32);
  m = scale == 1.0 ? (m.is_same(g) ? m.clone() : m) : m * scale;
  m.storage()->set_category(Category::Gradient);
  masters_[i].set_grad(m);
}

void MasterWeights::masters_to_params() {
  for (size_t i = 0; i < params_.size(); ++i) master_to_param(i);
  scale_ = coef_ = 1.0;
}

void MasterWeights::use_model_grads(double scale) {
  for (size_t i = 0; i < params_.size(); ++i) masters_[i].set_grad(params_[i].grad());  // undefined stays so
  scale_ = scale, coef_ = 1.0;
}

double MasterWeights::clip_grad_norm_(double max_norm, double norm_type, const std::function<double(double)>& combine) {
  optim::GradNormClipper clipper(max_norm, norm_type);
  bool meta = false;
  for (size_t i = 0; i < masters_.size(); ++i)
    if (Tensor g = masters_[i].grad(); g.defined())
      clipper.add(i, g, is_half(g.dtype()) ? scale_ : 1.0), meta |= g.is_meta();
  if (meta) return 0.0;  // meta: the temporaries' bytes, no norm and no scaling
  const double partial = combine ? combine(clipper.partial()) : clipper.partial();
  const double coef = clipper.coefficient(partial);
  if (coef < 1) coef_ = coef;  // the half gradients' second factor (GradNormClipper::clip scales only then)
  for (auto& m : masters_)     // float32 copies (grads_to_masters) are scaled in place
    if (Tensor g = m.grad(); g.defined() && !is_half(g.dtype())) optim::GradNormClipper::clip(g, coef);
  return clipper.total_norm(partial);
}

void MasterWeights::step(optim::Optimizer& opt) {
  opt.set_grad_factors(scale_, coef_);
  opt.step();
  masters_to_params();
}

void MasterWeights::drop_grads() {
  for (auto& m : masters_) m.set_grad(Tensor());
  scale_ = coef_ = 1.0;
}

void MasterWeights::master_to_param(size_t i) {
  NoGradGuard ng;
  params_.at(i).copy_(masters_[i]);
  masters_[i].set_grad(Tensor());
}

}  // namespace mg::amp
