#include <memgrad/autograd/node.h>

#include <atomic>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/ops.h>
#include <memgrad/core/tensor_impl.h>

namespace mg {

namespace autograd {

namespace {
std::atomic<uint64_t> g_sequence{0};
thread_local std::vector<std::pair<SavedTensorHooks::Pack, SavedTensorHooks::Unpack>> t_saved_hooks;
}  // namespace

Node::Node(Op op, std::string label) : op_(op), label_(std::move(label)), sequence_nr_(g_sequence++) {}

// ---- saved tensors

struct SavedTensor::State {
  Tensor tensor;  // a detached alias (no history: no reference cycles)
  std::any packed;
  SavedTensorHooks::Unpack unpack;
  uint64_t version = 0;
  std::shared_ptr<Storage> storage;  // for the version check and the Activation label (unpacked only)
  std::weak_ptr<Storage> watched;    // the version check under hooks, without keeping the bytes alive
  Shape shape;
  DType dtype;

  ~State() {
    if (tensor.defined()) tensor.storage()->drop_saved_ref();
  }
};

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  state_ = std::make_shared<State>();
  state_->version = t.version();
  state_->shape = t.shape();
  state_->dtype = t.dtype();
  if (!t_saved_hooks.empty()) {  // the hooks own the value: keep no reference to its storage
    auto [pack, unpack] = t_saved_hooks.back();
    state_->unpack = unpack;
    state_->watched = t.storage();
    state_->packed = pack(t.detach());
  } else {
    state_->storage = t.storage();
    state_->tensor = t.detach();
    state_->storage->add_saved_ref();
  }
}

Tensor SavedTensor::get() const {
  MG_CHECK(state_, AutogradError, "backward: a saved tensor was used after it was released");
  // Under hooks the original may be gone (then nobody can modify it any more).
  std::shared_ptr<Storage> s = state_->unpack ? state_->watched.lock() : state_->storage;
  MG_CHECK(!s || s->version() == state_->version, AutogradError, "backward: a tensor of shape ",
           shape_str(state_->shape), " (", state_->dtype,
           ") that was saved for backward has been modified by an in-place operation: expected version ",
           state_->version, ", got version ", s->version(), ". Use an out-of-place op, or clone() before modifying it");
  if (state_->unpack) return state_->unpack(state_->packed);
  return state_->tensor;
}

SavedTensorHooks::SavedTensorHooks(Pack pack, Unpack unpack) {
  t_saved_hooks.emplace_back(std::move(pack), std::move(unpack));
}
SavedTensorHooks::~SavedTensorHooks() { t_saved_hooks.pop_back(); }

// ---- nodes

TensorList FunctionNode::apply(TensorList&& grad_outputs) {
  MG_CHECK(fn_, AutogradError, "backward: trying to backward through ", name(),
           " a second time, but its saved tensors were already freed. Pass retain_graph = true to "
           "the first backward() to backward through the graph again");
  return fn_(grad_outputs, *this);
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node(Op::none, "AccumulateGrad"), leaf_(leaf) {}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  auto leaf = leaf_.lock();
  if (!leaf || !grads[0].defined()) return {};
  NoGradGuard no_grad;
  Tensor self(leaf);
  {  // the incoming buffers are released before the post-accumulate hooks run
    Tensor g = grads[0];
    grads.clear();
    for (auto& h : leaf->leaf_hooks)
      if (Tensor r = h(g); r.defined()) g = r;
    Tensor cur = self.grad();
    if (!cur.defined()) {
      // Take the incoming buffer when nothing else refers to it; otherwise copy it.
      bool sole = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous() &&
                  g.dtype() == leaf->dtype && g.storage_offset() == 0 &&
                  size_t(g.numel()) * g.element_size() == g.storage()->nbytes();
      Tensor owned;
      {
        MemoryScope scope(Category::Gradient);
        owned = sole ? g : g.to(leaf->dtype).clone();
      }
      owned.storage()->set_category(Category::Gradient);
      if (auto* param_block = leaf->storage->block())  // the ledger names the buffer after its parameter
        owned.storage()->set_owner(param_block->owner.empty() ? "grad" : param_block->owner + ".grad");
      self.set_grad(owned);
    } else {
      cur.add_(g);
    }
  }
  const auto hooks = leaf->post_accumulate_hooks;  // a hook may remove itself
  for (auto& [id, h] : hooks) h(self);
  return {};
}

// ---- recording

bool any_requires_grad(const TensorList& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  auto* impl = t.impl();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr};
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return {acc, 0};
}

std::shared_ptr<Node> record(Op op, const TensorList& inputs, const TensorList& outputs, BackwardFn fn,
                             std::string label) {
  if (!any_requires_grad(inputs)) return nullptr;
  auto node = std::make_shared<FunctionNode>(op, std::move(label), std::move(fn));
  for (auto& t : inputs) node->next_edges().push_back(gradient_edge(t));
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    auto* o = outputs[i].impl();
    node->outputs().push_back({o->shape, o->dtype, o->storage->device()});
    if (!is_floating(o->dtype)) continue;  // integer outputs (indices) carry no gradient
    o->requires_grad = true;
    o->grad_fn = node;
    o->output_nr = i;
  }
  return node;
}

}  // namespace autograd
}  // namespace mg
