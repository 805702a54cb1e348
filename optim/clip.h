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
// clip_grad_norm_ in two halves, for gradients that are not alive all at once (stepping inside
// backward): each gradient's part of the norm is added as parameter i, then each gradient is scaled
// by the coefficient the parts give. The parts are combined in index order, so with the same
// gradients the norm and the scaling are clip_grad_norm_'s to the bit.
class GradNormClipper {
 public:
  explicit GradNormClipper(double max_norm, double norm_type = 2.0);
  // Records grad's part as parameter i's (on meta: the temporaries' bytes, no value). A half grad is
  // widened to float32 first; `scale` then multiplies it (rounded to its dtype, as mul_ would): the
  // part of a half gradient that a float32 master's step reads with that factor (set_grad_factors).
  void add(size_t i, const Tensor& grad, double scale = 1.0);
  // The parts so far combined (the sum of the norm_type-th powers, or the largest for the infinity norm).
  double partial() const;
  // The total norm and the coefficient of a partial (combined across processes, say).
  double total_norm(double partial) const;
  double coefficient(double partial) const;  // max_norm / (total + 1e-6); >= 1 means no clipping
  // Scales grad in place when coef < 1.
  static void clip(Tensor grad, double coef);

 private:
  double max_norm_, norm_type_;
  std::vector<double> parts_;
};
// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace mg::optim
