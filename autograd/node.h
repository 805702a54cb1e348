// The dynamic graph: each differentiable op that sees an input requiring grad records a Node
// holding its saved tensors and a backward function. Edges point at the nodes that produced
// the op's inputs (or at a leaf's gradient accumulator).
#pragma once
#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <memgrad/core/op.h>
#include <memgrad/core/tensor.h>

namespace mg::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  uint32_t input_nr = 0;       // which gradient slot of `node`
  bool valid() const { return node != nullptr; }
};

// Shape, dtype and device of a node's output, to build zero gradients for unused outputs.
struct OutputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

using TensorList = std::vector<Tensor>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  // `label` names a node that is not a built-in op (a user's function, a leaf's accumulator).
  explicit Node(Op op, std::string label = {});
  virtual ~Node() = default;

  // Maps gradients w.r.t. this node's outputs to gradients w.r.t. its inputs (one per edge;
  // undefined where an input needs none).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  // Drops saved tensors after backward (unless retain_graph). A later apply() then raises.
  virtual void release_saved() {}

  Op op() const { return op_; }
  std::string_view name() const { return label_.empty() ? std::string_view(op_name(op_)) : label_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  std::vector<Edge>& next_edges() { return next_edges_; }
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].valid(); }
  std::vector<OutputMeta>& outputs() { return outputs_; }
  // Hooks run on the gradient of output `output_nr` before apply().
  std::map<uint32_t, std::vector<GradHook>>& pre_hooks() { return pre_hooks_; }

 private:
  Op op_;
  std::string label_;
  uint64_t sequence_nr_;
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> outputs_;
  std::map<uint32_t, std::vector<GradHook>> pre_hooks_;
};

// A tensor an op keeps for its backward. While held, its bytes count as Activation. It
// remembers the version it was saved at, so an in-place change before backward is caught.
// Active saved-tensor hooks (see SavedTensorHooks) may pack it into something else.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  Tensor get() const;  // raises AutogradError if modified in place or released
  bool defined() const { return state_ != nullptr; }

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Saved-tensor pack/unpack hooks, active for ops recorded inside the scope (innermost wins).
// pack runs when an op saves a tensor; unpack when backward needs it.
class SavedTensorHooks {
 public:
  using Pack = std::function<std::any(const Tensor&)>;
  using Unpack = std::function<Tensor(const std::any&)>;
  SavedTensorHooks(Pack pack, Unpack unpack);
  ~SavedTensorHooks();
  SavedTensorHooks(const SavedTensorHooks&) = delete;
  SavedTensorHooks& operator=(const SavedTensorHooks&) = delete;
};

// Backward as a function object: `fn(grad_outputs, node)` returns one gradient per input.
// Its captures hold the saved tensors; releasing the node destroys them.
using BackwardFn = std::function<TensorList(const TensorList& grad_outputs, const Node& node)>;

class FunctionNode : public Node {
 public:
  FunctionNode(Op op, std::string label, BackwardFn fn) : Node(op, std::move(label)), fn_(std::move(fn)) {}
  TensorList apply(TensorList&& grad_outputs) override;
  void release_saved() override { fn_ = nullptr; }

 private:
  BackwardFn fn_;
};

// Accumulates incoming gradients into a leaf's .grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  TensorList apply(TensorList&& grad_outputs) override;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// True when grad mode is on and any input requires grad.
bool any_requires_grad(const TensorList& inputs);
// The edge through which gradient flows into `t` (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);
// Records `fn` as the backward of an op mapping `inputs` to `outputs` when any input requires
// grad (and grad mode is on); outputs then require grad and point at the new node.
// `label` names a user's function (op Op::custom).
std::shared_ptr<Node> record(Op op, const TensorList& inputs, const TensorList& outputs, BackwardFn fn,
                             std::string label = {});
// Runs the backward pass from `roots` seeded with `grads` (see Tensor::backward).
void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph);

}  // namespace mg::autograd
