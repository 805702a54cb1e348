// Kernel runs under a budget: arguments brought back and locked for the run, in-place writes rescued
// first, and each storage the kernel writes given the call as (part of) its recipe.
#include <algorithm>

#include <memgrad/core/budget/cell_impl.h>

namespace mg::budget::detail {

using namespace impl;

struct KernelRun::State {
  Device device;
  const char* kernel;
  std::vector<Tensor> tensors;
  std::vector<bool> written;
  Replay replay;
  double flops = 0;
  std::vector<std::shared_ptr<Cell>> cells;  // per tensor (null: undefined or not managed)
  std::vector<std::shared_ptr<Cell>> locked;
  void bring_back_and_lock();
};

KernelRun::KernelRun(const Device& d, const char* kernel, std::vector<Tensor> tensors, std::vector<bool> written,
                     Replay replay, double flops)
    : s_(new State{d, kernel, std::move(tensors), std::move(written), std::move(replay), flops, {}, {}}) {}

KernelRun::~KernelRun() {
  Lock g(mu());
  for (auto& c : s_->locked) --c->locks;
  device_budget(s_->device).running.reset();
}

// Brings the arguments back and locks them for the run: the floor noted first, in-place writes rescued.
void KernelRun::State::bring_back_and_lock() {
  State& s = *this;
  const size_t n = s.tensors.size();
  Lock g(mu());
  auto& db = device_budget(s.device);
  s.cells.resize(n);
  for (size_t i = 0; i < n; ++i)
    if (s.tensors[i].defined() && s.tensors[i].device() == s.device) s.cells[i] = s.tensors[i].storage()->budget_cell();
  // What it needs resident in every mode (the floor), known before anything is brought back.
  db.running = kernel_need(db, s.kernel, s.cells);
  if (db.options.trace) note_uses(db, s.cells);
  // In-place writes: what would be recomputed from the old values is rescued first.
  for (size_t i = 0; i < n; ++i)
    if (s.cells[i] && s.written[i] && !s.cells[i]->fresh) before_overwrite(*s.cells[i]);
  // The arguments that hold values and are resident now are held first: making the others again (a
  // chain of recomputes, in backward) must not push out what this kernel reads next, such as the
  // gradient flowing through. Outputs not yet written come last: they can wait for the inputs.
  int64_t working = 0;
  for (bool first : {true, false})
    for (size_t i = 0; i < n; ++i) {
      auto& c = s.cells[i];
      if (!c || (c->resident() && !c->fresh) != first ||
          std::find(s.locked.begin(), s.locked.end(), c) != s.locked.end())
        continue;
      if (!stays_on_host(*c)) ensure_resident(*c);
      ++c->locks;
      s.locked.push_back(c);
      working += int64_t(memory::round_size(c->nbytes));
    }
  if (working > db.stats.largest_working_set) {
    db.stats.largest_working_set = working;
    db.stats.largest_working_set_kernel = s.kernel;
  }
}

void KernelRun::run(const std::function<void()>& body) {
  State& s = *s_;
  const size_t n = s.tensors.size();
  s.bring_back_and_lock();
  int64_t scratch_base;
  {
    Lock g(mu());
    auto& db = device_budget(s.device);
    scratch_base = db.scratch_peak = db.scratch_now;
  }
  const int64_t t0 = now_ns();
  {
    KernelDepth depth;
    body();
  }
  Lock g(mu());
  auto& db = device_budget(s.device);
  if (db.running) note_floor(db, *db.running, db.scratch_peak - scratch_base);
  db.running.reset();
  // What running it again costs: its measured time, or (Cost::Modeled) the model's time for its
  // FLOPs and its arguments' bytes, which also advances the modeled clock.
  double bytes = 0;
  for (const Tensor& t : s.tensors)
    if (t.defined()) bytes += double(t.storage()->nbytes());
  const double modeled = db.options.model.kernel_seconds(s.flops, bytes);
  db.stats.modeled_seconds += modeled;
  double seconds = seconds_since(t0);
  db.fit.add(s.flops, bytes, seconds);
  ++db.stats.kernels, db.stats.kernel_seconds += seconds;
  if (db.options.cost == Cost::Modeled) {
    seconds = modeled;
    db.modeled_ns += std::max<int64_t>(1, int64_t(seconds * 1e9));
  }
  // The cells the kernel wrote, and whether any of them held a value before (an in-place write).
  std::vector<Cell*> outputs, fresh;
  bool in_place = false;
  for (size_t i = 0; i < n; ++i) {
    Cell* c = s.cells[i].get();
    if (!c || !s.written[i] || std::find(outputs.begin(), outputs.end(), c) != outputs.end()) continue;
    outputs.push_back(c);
    in_place |= !c->fresh;
    if (c->fresh) fresh.push_back(c);
  }
  std::shared_ptr<Call> call;
  // A recipe must not read its own changing inputs: an in-place write is recorded only when it is the
  // call's one output (appended to that cell's recipe), and its fresh outputs get none.
  if (s.replay && (!in_place || outputs.size() == 1)) {
    call = std::make_shared<Call>();
    call->kernel = s.kernel;
    call->replay = std::move(s.replay);
    call->flops = s.flops;
    call->cost = seconds;
    call->modeled = modeled;
    for (size_t i = 0; i < n; ++i) {
      const Tensor& t = s.tensors[i];
      Arg a;
      a.defined = t.defined();
      if (a.defined) {
        a.nbytes = t.storage()->nbytes();
        a.shape = t.shape(), a.strides = t.strides(), a.offset = t.storage_offset(), a.dtype = t.dtype();
      }
      Cell* c = s.cells[i].get();
      if (c && std::find(outputs.begin(), outputs.end(), c) != outputs.end()) {
        a.written = s.cells[i];
        a.written_id = c;
      } else if (c) {
        a.read = s.cells[i];
      } else if (a.defined) {
        call.reset();  // an argument on another device or unmanaged: this call cannot be replayed
        break;
      }
      call->args.push_back(std::move(a));
    }
  }
  for (Cell* c : outputs) {
    // Parameters, gradients and optimizer state never leave for recompute: no recipe to keep.
    if (!call || (!c->fresh && !c->recomputable) || c->exposed || pinned_category(category(*c))) {
      c->fresh = false;
      drop_recipe(*c);
      continue;
    }
    if (c->fresh) c->recipe.clear(), c->cost = 0;
    c->fresh = false;
    c->recipe.push_back(call);
    c->recomputable = true;
    c->cost += call->cost;
    for (auto& a : call->args)
      if (a.read) add_dependent(*a.read, c->self);
  }
  bool gradient = false;  // what is made from a gradient is one
  for (size_t i = 0; i < n; ++i) gradient |= s.cells[i] && !s.written[i] && s.cells[i]->gradient;
  if (gradient)
    for (Cell* c : outputs) c->gradient = true;
  for (size_t i = 0; i < n; ++i)  // read before any kernel wrote it: its value is not reproducible
    if (s.cells[i] && s.cells[i]->fresh) s.cells[i]->fresh = false;
  for (auto& c : s.cells)
    if (c) c->last_use = clock(db);
  // Optimizer-state offload: the state lives in the host pool between steps.
  const Offload o = db.options.offload;
  if (o == Offload::Optimizer || o == Offload::All)
    for (Cell* c : outputs)
      if (c->block && c->block->category == Category::OptimizerState && c->locks == 1 && !c->user_pinned && !c->exposed)
        offload(*c);
  for (auto& c : s.locked) --c->locks;  // the arguments are free to leave as a plan says
  s.locked.clear();
  kernel_done(db, s.device, s.kernel, fresh, modeled);
}

}  // namespace mg::budget::detail
