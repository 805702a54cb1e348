// The dynamic graph: each differentiable op that sees an input requiring grad records a Node
// holding its saved tensors and a backward function. Edges point at the nodes that produced
// the op's inputs (or at a leaf's gradient accumulator).
#pragma once
#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/op.h>
#include <memgrad/core/small_vector.h>
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
// A node's lists, inline for the common few entries (an op has one to three inputs, mostly one
// output, and saves up to three tensors), so that recording a node allocates only the node.
using EdgeList = SmallVector<Edge, 3>;
using OutputMetaList = SmallVector<OutputMeta, 2>;
using StorageRefs = SmallVector<std::weak_ptr<Storage>, 3>;

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
  EdgeList& next_edges() { return next_edges_; }
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].valid(); }
  OutputMetaList& outputs() { return outputs_; }
  // Hooks run on the gradient of output `output_nr` before apply().
  std::map<uint32_t, std::vector<GradHook>>& pre_hooks() { return pre_hooks_; }
  // The storages of the tensors the op saved for this node (not kept alive): what apply() will read,
  // which a memory budget (core/budget/budget.h) fetches back ahead of it.
  StorageRefs& saved_storages() { return saved_storages_; }

 protected:
  // Raises AutogradError when apply() runs after release_saved() (a second backward).
  void check_not_released(bool saved) const;

 private:
  Op op_;
  std::string label_;
  uint64_t sequence_nr_;
  EdgeList next_edges_;
  OutputMetaList outputs_;
  std::map<uint32_t, std::vector<GradHook>> pre_hooks_;
  StorageRefs saved_storages_;
};

// A tensor an op keeps for its backward. While held, its bytes count as Activation. It
// remembers the version it was saved at, so an in-place change before backward is caught.
// Active saved-tensor hooks (see SavedTensorHooks) may pack it into something else.
//
// It also remembers where its value came from, for backward passes that create a graph
// (create_graph): there get() returns the value with that history, so the gradient computed from
// it can be differentiated again. An input's history is its gradient edge at saving time; an
// output's is the node that produced it (record() recognises the op's outputs among the tensors
// saved since the previous record on this thread, so an op saves its outputs right before it records).
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // Saves `value` (say, a contiguous copy made without history) with the history of `source`.
  SavedTensor(const Tensor& value, const Tensor& source);
  // The value; raises AutogradError if modified in place or released. In grad mode (a backward
  // creating a graph) it carries its history, through a node of its own.
  Tensor get() const;
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

// A FunctionNode whose backward closure, of type F, lives inside the node: what record() makes
// from a lambda, without std::function's separate allocation of the captures.
template <class F>
class ClosureNode : public Node {
 public:
  ClosureNode(Op op, F fn) : Node(op), fn_(std::move(fn)) {}
  TensorList apply(TensorList&& grad_outputs) override {
    check_not_released(fn_.has_value());
    return (*fn_)(grad_outputs, *this);
  }
  void release_saved() override { fn_.reset(); }

 private:
  std::optional<F> fn_;
};

// Accumulates incoming gradients into a leaf's .grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  TensorList apply(TensorList&& grad_outputs) override;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// True when `g` is a dense buffer nothing else refers to (no other handle, view or saved copy):
// backward may take it as a leaf's .grad, or add a second gradient into it in place.
bool sole_buffer(const Tensor& g);

// True when grad mode is on and any input requires grad. The second form takes the inputs as
// written at a call (`any_requires_grad({x, w})`) without building a TensorList.
bool any_requires_grad(const TensorList& inputs);
bool any_requires_grad(std::initializer_list<std::reference_wrapper<const Tensor>> inputs);
// The edge through which gradient flows into `t` (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);
// Records `fn` as the backward of an op mapping `inputs` to `outputs` when any input requires
// grad (and grad mode is on); outputs then require grad and point at the new node.
// `label` names a user's function (op Op::custom).
std::shared_ptr<Node> record(Op op, const TensorList& inputs, const TensorList& outputs, BackwardFn fn,
                             std::string label = {});

namespace detail {
using TensorRefs = std::initializer_list<std::reference_wrapper<const Tensor>>;
// The parts of record() that do not depend on the closure's type. An op's saves (the origins of
// the tensors saved since the previous record on this thread) are taken first, as reading the
// inputs' histories may record nodes of its own (a view's history brought up to date).
struct Origin;
using Saves = std::vector<std::weak_ptr<Origin>>;
Saves take_saves();
void link_input(Node& node, const Tensor& input);
void link_saves(Node& node, const Saves& saves);  // the storages the op's saves hold (Node::saved_storages)
void link_output(const std::shared_ptr<Node>& node, const Tensor& output, uint32_t output_nr, const Saves& saves);
void recycle_saves(Saves&& saves);  // keeps the list's memory for later ops
// Records the node make_node() gives (made only when a node is needed).
template <class Inputs, class Outputs, class MakeNode>
std::shared_ptr<Node> record_with(const Inputs& inputs, const Outputs& outputs, MakeNode&& make_node) {
  Saves saves = take_saves();
  std::shared_ptr<Node> node;
  if (any_requires_grad(inputs)) {
    node = make_node();
    node->next_edges().reserve(inputs.size());
    for (const Tensor& t : inputs) link_input(*node, t);
    link_saves(*node, saves);
    node->outputs().reserve(outputs.size());
    uint32_t i = 0;
    for (const Tensor& t : outputs) link_output(node, t, i++, saves);
  }
  recycle_saves(std::move(saves));
  return node;
}
template <class Inputs, class Outputs, class F>
std::shared_ptr<Node> record_closure(Op op, const Inputs& inputs, const Outputs& outputs, F&& fn) {
  return record_with(inputs, outputs, [&] {
    return std::shared_ptr<Node>(std::make_shared<ClosureNode<std::decay_t<F>>>(op, std::forward<F>(fn)));
  });
}
}  // namespace detail

// The same for a closure (a lambda) kept inside the node, and for inputs and outputs written as
// braced lists (`record(Op::mul, {a, b}, {out}, [=](...) {...})`), which are not copied: the form
// the ops use, as it allocates less.
template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, BackwardFn>>>
std::shared_ptr<Node> record(Op op, detail::TensorRefs inputs, detail::TensorRefs outputs, F&& fn) {
  return detail::record_closure(op, inputs, outputs, std::forward<F>(fn));
}
template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, BackwardFn>>>
std::shared_ptr<Node> record(Op op, const TensorList& inputs, detail::TensorRefs outputs, F&& fn) {
  return detail::record_closure(op, inputs, outputs, std::forward<F>(fn));
}
template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, BackwardFn>>>
std::shared_ptr<Node> record(Op op, const TensorList& inputs, const TensorList& outputs, F&& fn) {
  return detail::record_closure(op, inputs, outputs, std::forward<F>(fn));
}
// `t`'s value (sharing its storage) with a history of its own: a node that passes its gradient on
// to `edge`, summed to `shape` and converted to `dtype` (where `t` is a broadcast or converted copy
// of the tensor `edge` belongs to).
Tensor with_history(const Tensor& t, Edge edge);
Tensor with_history(const Tensor& t, Edge edge, const Shape& shape, DType dtype);

// Runs the backward pass from `roots` seeded with `grads`, accumulating into the leaves' .grad
// (see Tensor::backward). With create_graph the backward formulas run in grad mode and record
// history, so the gradients can be differentiated again.
void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph = false);

// torch::autograd::grad: the gradients of `outputs` (seeded with `grad_outputs`, one per output;
// an undefined one is 1 for a one-element output) with respect to `inputs`, returned rather than
// accumulated into any .grad. retain_graph defaults to create_graph. An input the outputs do not
// depend on raises AutogradError, or gives an undefined gradient with allow_unused.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false, bool allow_unused = false);

// The gradients of fn(inputs) w.r.t. `inputs` (undefined for those that need none) for upstream
// `grad_outputs`, with history: how the backward of an op whose fused kernel has no derivative
// of its own runs when a graph is being created. It recomputes the op from differentiable ops
// (`fn`) and differentiates that, stopping at the inputs (their own histories are not entered).
TensorList differentiate(const std::function<TensorList(const TensorList&)>& fn, const TensorList& inputs,
                         const TensorList& grad_outputs);

// True inside a backward formula that must record history (a backward pass creating a graph):
// the engine runs the formulas in grad mode exactly then.
inline bool creating_graph() { return GradMode::is_enabled(); }

}  // namespace mg::autograd
