// Losses as modules (the functional forms are mg::cross_entropy and mg::mse_loss in ops/ops.h).
#pragma once
#include <memgrad/ops/ops.h>

namespace mg::nn {

// logits [N, C] or [N, C, d...] against int64 class indices [N] or [N, d...].
struct CrossEntropyLoss {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::Mean;
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return cross_entropy(logits, target, ignore_index, label_smoothing, reduction);
  }
};

struct MSELoss {
  Reduction reduction = Reduction::Mean;
  Tensor operator()(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
};

// Mean cross-entropy of language-model logits [B, T, V] against next tokens [B, T].
inline Tensor lm_loss(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100) {
  MG_CHECK(logits.dim() == 3 && targets.dim() == 2, ShapeError, "lm_loss: expected logits [B, T, V] and targets ",
           "[B, T], got ", shape_str(logits.shape()), " and ", shape_str(targets.shape()));
  return cross_entropy(logits.reshape({-1, logits.size(2)}), targets.reshape({-1}), ignore_index);
}

}  // namespace mg::nn
