#include <memgrad/autograd/node.h>

#include <atomic>

#include <memgrad/autograd/grad_math.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/tensor_impl.h>

namespace mg {

namespace autograd {

namespace detail {
// Where a saved value came from, for backward passes that create a graph.
struct Origin {
  std::weak_ptr<TensorImpl> original;  // the tensor saved, to recognise an op's outputs in record()
  std::optional<Shape> shape;          // its shape where the value saved has another (an expanded copy); and its dtype
  DType dtype = kFloat32;
  Edge edge;                     // an input's gradient edge when it was saved
  std::weak_ptr<Node> producer;  // an output's node (weak: the node holds this), and its slot
  uint32_t output_nr = 0;
  std::weak_ptr<Storage> storage;  // the saved value's bytes (not under hooks), for Node::saved_storages
};
}  // namespace detail

namespace {
using detail::Origin;
std::atomic<uint64_t> g_sequence{0};
// Read on every save and record: initial-exec, as t_scopes in core/memory/allocator.cpp (no __tls_get_addr call).
__attribute__((
    tls_model("initial-exec"))) thread_local std::vector<std::pair<SavedTensorHooks::Pack, SavedTensorHooks::Unpack>>
    t_saved_hooks;
// The origins saved on this thread since the last record(), which marks those of its outputs;
// and a spare list, so that taking them allocates nothing.
__attribute__((tls_model("initial-exec"))) thread_local detail::Saves t_recent_saves, t_spare_saves;
}  // namespace

Node::Node(Op op, std::string label) : op_(op), label_(std::move(label)), sequence_nr_(g_sequence++) {}

// ---- saved tensors

struct SavedTensor::State {
  // The value, as its storage and layout rather than a tensor (a detached alias made in every
  // get()): saving allocates no TensorImpl. The storage is kept (and counted as Activation) only
  // when unpacked; the shape also names the value in error messages under hooks.
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  DType dtype;
  std::any packed;
  SavedTensorHooks::Unpack unpack;
  uint64_t version = 0;
  std::weak_ptr<Storage> watched;  // the version check under hooks, without keeping the bytes alive
  Origin origin;

  ~State() {
    if (storage) storage->drop_saved_ref();
  }
};

SavedTensor::SavedTensor(const Tensor& t) : SavedTensor(t, t) {}

SavedTensor::SavedTensor(const Tensor& t, const Tensor& source) {
  if (!t.defined()) return;
  state_ = std::make_shared<State>();
  state_->version = t.version();
  state_->shape = t.shape();
  state_->dtype = t.dtype();
  state_->origin.original = source.impl_ptr();
  if (!source.is_same(t) && source.shape() != t.shape()) state_->origin.shape = source.shape();
  state_->origin.dtype = source.dtype();
  state_->origin.edge = gradient_edge(source);
  t_recent_saves.push_back(std::shared_ptr<Origin>(state_, &state_->origin));
  if (!t_saved_hooks.empty()) {  // the hooks own the value: keep no reference to its storage
    auto [pack, unpack] = t_saved_hooks.back();
    state_->unpack = unpack;
    state_->watched = t.storage();
    state_->packed = pack(t.detach());
  } else {
    state_->storage = t.storage();
    state_->strides = t.strides();
    state_->offset = t.storage_offset();
    state_->origin.storage = state_->storage;
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
  Tensor t = state_->unpack
                 ? state_->unpack(state_->packed)
                 : make_tensor(state_->storage, state_->shape, state_->strides, state_->offset, state_->dtype);
  if (!GradMode::is_enabled()) return t;
  const Origin& o = state_->origin;
  if (auto producer = o.producer.lock()) return with_history(t, {producer, o.output_nr});
  return o.edge.valid() ? with_history(t, o.edge, o.shape ? *o.shape : t.shape(), o.dtype) : t;
}

SavedTensorHooks::SavedTensorHooks(Pack pack, Unpack unpack) {
  t_saved_hooks.emplace_back(std::move(pack), std::move(unpack));
}
SavedTensorHooks::~SavedTensorHooks() { t_saved_hooks.pop_back(); }

// ---- nodes

void Node::check_not_released(bool saved) const {
  MG_CHECK(saved, AutogradError, "backward: trying to backward through ", name(),
           " a second time, but its saved tensors were already freed. Pass retain_graph = true to "
           "the first backward() to backward through the graph again");
}

TensorList FunctionNode::apply(TensorList&& grad_outputs) {
  check_not_released(fn_ != nullptr);
  return fn_(grad_outputs, *this);
}

bool sole_buffer(const Tensor& g) {
  return g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous() &&
         g.storage_offset() == 0 && size_t(g.numel()) * g.element_size() == g.storage()->nbytes();
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node(Op::none, "AccumulateGrad"), leaf_(leaf) {}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  auto leaf = leaf_.lock();
  if (!leaf || !grads[0].defined()) return {};
  const bool keep_history = GradMode::is_enabled();  // create_graph: .grad itself is differentiable
  Tensor self(leaf);
  {  // the incoming buffers are released before the post-accumulate hooks run
    Tensor g = grads[0];
    grads.clear();
    for (auto& h : leaf->leaf_hooks)
      if (Tensor r = h(g); r.defined()) g = r;
    Tensor cur = self.grad();
    if (cur.defined() && !keep_history) {
      NoGradGuard no_grad;
      cur.add_(g);
    } else {
      // Take the incoming buffer when nothing else refers to it; otherwise copy it (or, with
      // history, add it to the current one out of place).
      const bool sole = !keep_history && g.dtype() == leaf->dtype && sole_buffer(g);
      Tensor owned;
      {
        MemoryScope scope(Category::Gradient);
        owned = sole ? g : cur.defined() ? math::add(cur, g.to(leaf->dtype)) : g.to(leaf->dtype).clone();
      }
      owned.storage()->set_category(Category::Gradient);
      if (auto* param_block = leaf->storage->block())  // the ledger names the buffer after its parameter
        owned.storage()->set_owner(param_block->owner_id ? param_block->owner() + ".grad" : "grad");
      self.set_grad(owned);
    }
  }
  NoGradGuard no_grad;
  const auto hooks = leaf->post_accumulate_hooks;  // a hook may remove itself
  for (auto& [id, h] : hooks) h(self);
  return {};
}

// ---- recording

namespace {
template <class List>
bool any_in(const List& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}
}  // namespace

bool any_requires_grad(const TensorList& inputs) { return any_in(inputs); }
bool any_requires_grad(std::initializer_list<std::reference_wrapper<const Tensor>> inputs) { return any_in(inputs); }

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (const auto& fn = t.grad_fn()) return {fn, t.impl()->output_nr};  // grad_fn() brings a view's up to date
  auto* impl = t.impl();
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace detail {
Saves take_saves() {
  Saves r = std::move(t_recent_saves);
  t_recent_saves = std::move(t_spare_saves);
  t_recent_saves.clear();
  return r;
}

void recycle_saves(Saves&& saves) {
  saves.clear();
  if (saves.capacity() > t_spare_saves.capacity()) t_spare_saves = std::move(saves);
}

void link_input(Node& node, const Tensor& input) { node.next_edges().push_back(gradient_edge(input)); }

void link_saves(Node& node, const Saves& saves) {
  for (auto& w : saves)
    if (auto origin = w.lock(); origin && !origin->storage.expired()) node.saved_storages().push_back(origin->storage);
}

void link_output(const std::shared_ptr<Node>& node, const Tensor& output, uint32_t output_nr, const Saves& saves) {
  auto* o = output.impl();
  node->outputs().push_back({o->shape, o->dtype, o->storage->device()});
  if (!is_floating(o->dtype)) return;  // integer outputs (indices) carry no gradient
  o->requires_grad = true;
  o->grad_fn = node;
  o->output_nr = output_nr;
  for (auto& w : saves)  // a saved output gets its history from this node
    if (auto origin = w.lock(); origin && origin->original.lock().get() == o) {
      origin->edge = {};
      origin->producer = node;
      origin->output_nr = output_nr;
    }
}
}  // namespace detail

std::shared_ptr<Node> record(Op op, const TensorList& inputs, const TensorList& outputs, BackwardFn fn,
                             std::string label) {
  return detail::record_with(inputs, outputs, [&] {
    return std::shared_ptr<Node>(std::make_shared<FunctionNode>(op, std::move(label), std::move(fn)));
  });
}

Tensor with_history(const Tensor& t, Edge edge) { return with_history(t, std::move(edge), t.shape(), t.dtype()); }

Tensor with_history(const Tensor& t, Edge edge, const Shape& shape, DType dtype) {
  Tensor alias = t.detach();
  auto node = std::make_shared<FunctionNode>(Op::none, "SavedTensor", [shape, dtype](const TensorList& g, const Node&) {
    Tensor r = g[0].shape() == shape ? g[0] : math::sum_to(g[0], shape);
    return TensorList{r.to(dtype)};
  });
  node->next_edges().push_back(std::move(edge));
  node->outputs().push_back({t.shape(), t.dtype(), t.device()});
  auto* impl = alias.impl();
  impl->requires_grad = true;
  impl->grad_fn = std::move(node);
  impl->output_nr = 0;
  return alias;
}

}  // namespace autograd
}  // namespace mg
