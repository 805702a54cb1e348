// Gradient clipping, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_.
#pragma once
#include <functional>
#include <limits>
#include <vector>

#include <memgrad/core/tensor.h>

namespace mg::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Scales all gradients by max_norm / (total + 1e-6) when their joint norm_type-norm exceeds
// max_norm; returns the total norm before clipping. Parameters without a gradient are skipped.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);
// The same when each process holds a part of the gradients (data parallelism with sharded gradients):
// `combine(partial)` returns every process's partial combined (the sum of the norm_type-th powers,
// or the maximum for the infinity norm), so every process scales by the same factor.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       const std::function<double(double)>& combine);
// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace mg::optim
