// Float32 master weights for a model stored in half precision (model.to(kFloat16)). The
// optimizer updates the masters; the model's half parameters are refreshed from them after each
// step. Masters count as OptimizerState in the ledger (owner "<param>.master"), so mixed-precision
// Adam holds 2 (half param) + 2 (half grad) + 4 (master) + 8 (moments) = 16 bytes per parameter
// between steps, as in ZeRO's accounting; the masters' float32 gradients exist only during a step.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <memgrad/core/tensor.h>

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

 private:
  std::vector<Tensor> params_, masters_;
  std::vector<std::string> names_;
};

}  // namespace mg::amp
