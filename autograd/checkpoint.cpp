#include <memgrad/autograd/checkpoint.h>

#include <unordered_map>

#include <memgrad/core/autocast.h>
#include <memgrad/core/flops.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/random.h>

namespace mg {

CheckpointPolicy CheckpointPolicy::keep_matmuls() {
  return {[](Op op) { return op == Op::matmul || op == Op::linear || op == Op::conv2d; }};
}

namespace {

// Everything a segment needs to run again, and what its first run saved.
struct Frame {
  SegmentFn fn;
  CheckpointPolicy policy;
  std::vector<autograd::SavedTensor> inputs;
  std::vector<bool> input_requires_grad;
  DrawLog draws;  // the first run's random draws, replayed by the recompute
  amp::AutocastState autocast;
  std::string owner;

  struct Slot {
    Shape shape;
    DType dtype;
    Tensor kept;  // saved by policy; else recomputed on demand
    uint64_t version = 0;
  };
  std::vector<Slot> slots;
  std::unordered_map<size_t, Tensor> recomputed;

  void recompute();
};

// Lives in a node's saved tensor: releasing the node releases the slot's tensor with it.
struct SlotHandle {
  std::shared_ptr<Frame> frame;
  size_t index;
  SlotHandle(const SlotHandle&) = delete;
  ~SlotHandle() {
    auto& slot = frame->slots[index];
    if (slot.kept.defined()) slot.kept.storage()->drop_saved_ref(), slot.kept = Tensor();
    auto it = frame->recomputed.find(index);
    if (it != frame->recomputed.end()) {
      it->second.storage()->drop_saved_ref();
      frame->recomputed.erase(it);
    }
  }
};

std::string describe(const Shape& s, DType t) { return shape_str(s) + " " + dtype_name(t); }

void Frame::recompute() {
  DrawLog::Replay same_random_numbers(draws);
  // A guard, not set_autocast_state: the half copies of parameters it caches are dropped when the
  // recompute ends (backward runs outside any guard, so nothing else would clear them; they stayed
  // allocated until the next guard closed, through the optimizer step).
  amp::AutocastGuard autocast_guard(autocast.dtype, autocast.enabled);
  EnableGradGuard grad;
  RecomputeScope counting;
  MemoryScope label("recompute" + (owner.empty() ? "" : "." + owner));
  std::vector<Tensor> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor x = inputs[i].defined() ? inputs[i].get().detach() : Tensor();
    if (x.defined() && input_requires_grad[i]) x.requires_grad_(true);
    args.push_back(x);
  }
  size_t next = 0;
  {
    autograd::SavedTensorHooks hooks(
        [this, &next](const Tensor& t) -> std::any {
          size_t i = next++;
          MG_CHECK(i < slots.size(), AutogradError, "checkpoint: the recomputation saved more tensors (", i + 1,
                   ") than the first run (", slots.size(), "); the segment must compute the same ops both times");
          MG_CHECK(slots[i].shape == t.shape() && slots[i].dtype == t.dtype(), AutogradError,
                   "checkpoint: saved tensor #", i, " was ", describe(slots[i].shape, slots[i].dtype),
                   " in the first run but ", describe(t.shape(), t.dtype()),
                   " when recomputed; the segment must be deterministic");
          if (!slots[i].kept.defined() && !recomputed.count(i)) {
            t.storage()->add_saved_ref();
            recomputed.emplace(i, t);
          }
          return {};
        },
        [](const std::any&) -> Tensor { throw AutogradError("checkpoint: a recomputed graph was differentiated"); });
    fn(args);
  }
  MG_CHECK(next == slots.size(), AutogradError, "checkpoint: the recomputation saved ", next,
           " tensors but the first run saved ", slots.size(), "; the segment must compute the same ops both times");
}

Tensor unpack(const std::any& packed) {
  const auto& h = std::any_cast<const std::shared_ptr<SlotHandle>&>(packed);
  Frame& f = *h->frame;
  auto& slot = f.slots[h->index];
  if (slot.kept.defined()) {
    MG_CHECK(slot.kept.version() == slot.version, AutogradError, "checkpoint: a tensor kept for backward (",
             describe(slot.shape, slot.dtype), ") was modified in place after it was saved");
    return slot.kept;
  }
  if (!f.recomputed.count(h->index)) f.recompute();
  return f.recomputed.at(h->index);
}

}  // namespace

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs, const CheckpointPolicy& policy) {
  if (!GradMode::is_enabled()) return fn(inputs);
  auto frame = std::make_shared<Frame>();
  frame->fn = fn;
  frame->policy = policy;
  frame->autocast = amp::autocast_state();
  frame->owner = current_owner();
  for (auto& x : inputs) {
    frame->inputs.emplace_back(x);  // inside an outer segment this is packed by the outer one
    frame->input_requires_grad.push_back(x.defined() && x.requires_grad());
  }
  std::weak_ptr<Frame> weak = frame;  // the hooks die with this call; handles own the frame
  autograd::SavedTensorHooks hooks(
      [weak](const Tensor& t) -> std::any {
        auto f = weak.lock();
        size_t i = f->slots.size();
        bool keep = f->policy.keep && f->policy.keep(memory::current_op());
        f->slots.push_back({t.shape(), t.dtype(), keep ? t : Tensor(), t.version()});
        if (keep) t.storage()->add_saved_ref();
        return std::shared_ptr<SlotHandle>(new SlotHandle{f, i});  // no temporary: its destructor releases
      },
      unpack);
  DrawLog::Recording record_draws(frame->draws);
  return fn(inputs);
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, const CheckpointPolicy& policy) {
  // Captures by value: the segment runs again during backward, after this call returned.
  return checkpoint([fn](const std::vector<Tensor>& x) { return std::vector<Tensor>{fn(x[0])}; }, {input}, policy)[0];
}

Tensor checkpoint_sequential(const std::vector<std::function<Tensor(const Tensor&)>>& stages, int64_t segments,
                             const Tensor& x, const CheckpointPolicy& policy) {
  MG_CHECK(segments >= 1, ValueError, "checkpoint_sequential: expected at least one segment, got ", segments);
  const int64_t n = int64_t(stages.size()), per = (n + segments - 1) / segments;
  Tensor h = x;
  for (int64_t start = 0; start < n; start += per) {
    int64_t end = std::min(n, start + per);
    std::vector<std::function<Tensor(const Tensor&)>> part(stages.begin() + start, stages.begin() + end);
    auto run = [part](const Tensor& in) {
      Tensor y = in;
      for (auto& stage : part) y = stage(y);
      return y;
    };
    h = end < n ? checkpoint(run, h, policy) : run(h);  // the last segment's activations are needed at once
  }
  return h;
}

}  // namespace mg
