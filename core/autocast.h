// Autocast: inside an AutocastGuard, matmul/linear/conv2d compute on half inputs (float32
// accumulation) and precision-sensitive ops (reductions, softmax, log_softmax, layer_norm,
// losses, exp, log) run in float32. The cast happens before autograd saves the inputs, so saved
// activations are half. A parameter's half copy is made once per guard, however often it is used.
#pragma once
#include <memgrad/core/tensor.h>

namespace mg::amp {

struct AutocastState {
  bool enabled = false;
  DType dtype = kFloat16;  // float16 or bfloat16
};

AutocastState autocast_state();
void set_autocast_state(const AutocastState& s);

class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = kFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState prev_;
};

// For op implementations: the input as the autocast dtype for half-precision ops (cached for
// leaves that require grad, i.e. parameters), or unchanged when autocast is off or t is not float.
Tensor cast_for_half_op(const Tensor& t);
// For precision-sensitive ops: half inputs widened to float32 when autocast is on.
Tensor cast_for_float_op(const Tensor& t);

}  // namespace mg::amp
