// TensorImpl: the state behind a Tensor handle. Private to memgrad (not installed): users reach it
// through Tensor's methods only, so its layout can change without breaking them.
#pragma once
#include <memory>
#include <vector>

#include <memgrad/core/tensor.h>

namespace mg {

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;

  // Autograd state. A tensor with a grad_fn is the output `output_nr` of that node.
  bool requires_grad = false;
  bool retains_grad = false;
  bool is_view = false;  // shares storage with a base that is part of a graph
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;                                  // for leaves
  std::vector<GradHook> leaf_hooks;                                                // run before accumulation into .grad
  std::vector<std::pair<uint64_t, PostAccumulateGradHook>> post_accumulate_hooks;  // run after it, by id
};

}  // namespace mg
