// Float32 master weights for a model stored in half precision (model.to(kFloat16)). The
// optimizer updates the masters; the model's half parameters are refreshed from them after each
// step. Masters count as OptimizerState in the ledger (owner "<param>.master"), so mixed-precision
// Adam holds 2 (half param) + 2 (half grad) + 4 (master) + 8 (moments) = 16 bytes per parameter
// between steps, as in ZeRO's accounting.
//
// Two ways to step. step(opt) (after use_model_grads, and clip_grad_norm_ if wanted) makes no float32
// gradients at all: each master's gradient is its parameter's half gradient, which the optimizer reads
// with the loss scaler's and clipping's factors (Optimizer::set_grad_factors; apex's FusedAdam), so
// the step holds 16 bytes per parameter plus one tensor's working memory. grads_to_masters copies
// every gradient to float32 first (4 more bytes per parameter during the step), for code that steps
// the masters as plain float32 parameters. Both update the masters to the same bits.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <memgrad/core/tensor.h>
#include <memgrad/optim/optimizer.h>

namespace mg::amp {

class MasterWeights {
 public:
  // `params` are the model's (half) parameters, with names for the ledger and reports.
  explicit MasterWeights(const std::vector<std::pair<std::string, Tensor>>& named_params);
  explicit MasterWeights(const std::vector<Tensor>& params);

  // Float32 leaves that require grad: give these to the optimizer.
  const std::vector<Tensor>& parameters() const { return masters_; }
  const std::vector<Tensor>& model_parameters() const { return params_; }
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;

  // masters[i].grad = float32(params[i].grad) * scale (params without a gradient are skipped).
  void grads_to_masters(double scale = 1.0);
  // params[i] = half(masters[i]); frees the masters' gradients.
  void masters_to_params();
  // The same for parameter i alone (stepping each parameter inside backward).
  void grad_to_master(size_t i, double scale = 1.0);
  void master_to_param(size_t i);

  // Each master's gradient becomes its parameter's half gradient itself (no copy), to be read times
  // `scale` (the loss scaler's 1/scale) by step().
  void use_model_grads(double scale = 1.0);
  // clip_grad_norm_ of the masters' gradients: of the float32 values the step will read from the half
  // gradients use_model_grads gave (when it clips, its coefficient becomes the step's second factor),
  // or of float32 copies (grads_to_masters), scaled in place. `combine` as in optim::clip_grad_norm_
  // (gradients sharded across processes). Returns the total norm (0 on meta).
  double clip_grad_norm_(double max_norm, double norm_type = 2.0,
                         const std::function<double(double)>& combine = nullptr);
  // opt (built over parameters()) steps the masters from the half gradients with the factors, then
  // params[i] = half(masters[i]) and the masters' gradients go (masters_to_params).
  void step(optim::Optimizer& opt);
  // Drops the masters' gradients and factors (a step the loss scaler skips).
  void drop_grads();

 private:
  std::vector<Tensor> params_, masters_;
  std::vector<std::string> names_;
  double scale_ = 1.0, coef_ = 1.0;  // the factors step() reads the half gradients with
};

}  // namespace mg::amp
