// Recompute-on-backward segments. checkpoint(fn, inputs) runs fn but keeps none of the tensors
// its ops save for backward (beyond what a policy keeps); the first backward use of a dropped
// tensor re-runs fn with the random draws (core/random.h's DrawLog, from any generator) and the
// autocast state of the original run, and each recomputed tensor is released as soon as the node
// that needed it has run.
#pragma once
#include <functional>
#include <string>

#include <memgrad/autograd/node.h>

namespace mg {

// Decides, per tensor an op saves inside a segment, whether to keep it (true) or recompute it.
// `op` is the op saving the tensor (e.g. Op::matmul, Op::gelu, Op::softmax; core/op.h).
struct CheckpointPolicy {
  std::function<bool(Op op)> keep;  // empty: recompute everything

  static CheckpointPolicy recompute_all() { return {}; }
  // Korthikanti et al. 2022 in spirit: keep outputs of matmul/linear/conv, recompute the cheap
  // memory-hungry ops (softmax, gelu, layer_norm, dropout, elementwise).
  static CheckpointPolicy keep_matmuls();
};

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Runs `fn(inputs)` as a recompute-on-backward segment. `fn` is copied and runs again during
// backward, so whatever it refers to must outlive the backward pass. Works nested, with several outputs,
// inputs that need no grad, retain_graph, and NoGradGuard inside fn. The ledger labels
// recomputed tensors with the owner prefix "recompute".
std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointPolicy& policy = {});
// Single-tensor convenience form.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const CheckpointPolicy& policy = {});

// Splits `stages` into `segments` consecutive groups and checkpoints each but the last, as
// torch.utils.checkpoint.checkpoint_sequential does.
Tensor checkpoint_sequential(const std::vector<std::function<Tensor(const Tensor&)>>& stages, int64_t segments,
                             const Tensor& x, const CheckpointPolicy& policy = {});

}  // namespace mg
