// Rematerialization: an evicted cell's bytes made again by replaying its recipe (recursively bringing
// back its inputs), and the rescue before an in-place write changes what a recipe would read.
#include <algorithm>
#include <unordered_set>

#include <memgrad/core/budget/cell_impl.h>
#include <memgrad/core/flops.h>

namespace mg::budget {

namespace impl {

namespace {
thread_local int t_replaying = 0;

// Builds the tensor a replayed kernel sees for argument `a`.
Tensor view_of(const Arg& a, void* ptr, const Device& d) {
  return make_tensor(std::make_shared<Storage>(ptr, a.nbytes, d, nullptr), a.shape, a.strides, a.offset, a.dtype);
}

// An evicted output of `call` besides the one being made, which that replay can make too: its recipe
// is the call alone, and it is wanted (a handle refers to it, or an evicted reader's recipe reads it).
bool comes_along(const Cell& other, const Call& call) {
  if (!other.evicted() || other.fresh || !other.recomputable || other.recipe.size() != 1 ||
      other.recipe[0].get() != &call)
    return false;
  if (other.has_storage) return true;
  for (auto& r : readers(const_cast<Cell&>(other)))
    if (r->evicted()) return true;
  return false;
}

// Runs `call` again so that `target` (resident, locked) gets the bytes the call wrote into it.
// Inputs are brought back and locked. Its other outputs, which it writes anyway, are made again too
// where they are wanted (comes_along); the rest go to scratch that is dropped: a layer norm's residual
// sum is not recomputed twice.
void replay(const Call& call, Cell& target) {
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Cell>> locked, along;
  struct Unlock {
    std::vector<std::shared_ptr<Cell>>& cells;
    ~Unlock() {
      for (auto& c : cells) --c->locks;
    }
  } unlock{locked};
  for (const Arg& a : call.args) {
    if (!a.defined) {
      tensors.emplace_back();
    } else if (a.read) {
      ensure_resident(*a.read);
      ++a.read->locks;
      locked.push_back(a.read);
      tensors.push_back(view_of(a, a.read->ptr(), target.device));
    } else if (a.written_id == &target) {
      tensors.push_back(view_of(a, target.ptr(), target.device));
    } else if (auto other = a.written.lock(); other && comes_along(*other, call)) {
      other->block = allocate_for(*other);
      ++other->locks;
      locked.push_back(other);
      along.push_back(other);
      tensors.push_back(view_of(a, other->ptr(), target.device));
    } else {
      MemoryScope scope(Category::Workspace, "recompute");
      auto scratch = std::make_shared<Storage>(target.device, a.nbytes, Category::Workspace);
      tensors.push_back(make_tensor(scratch, a.shape, a.strides, a.offset, a.dtype));
    }
  }
  ++t_replaying;
  detail::KernelDepth depth;
  try {
    call.replay(tensors);
  } catch (...) {
    --t_replaying;
    for (auto& o : along) release_block(*o);
    throw;
  }
  --t_replaying;
  if (call.flops > 0) {
    RecomputeScope recompute;
    count_flops(call.flops);
  }
  auto& db = device_budget(target.device);
  // A replay takes time as the first run did: the modeled clock moves on, so that what a long chain
  // of recomputes made and used first grows stale before what it made last.
  if (db.options.cost == Cost::Modeled) db.modeled_ns += std::max<int64_t>(1, int64_t(call.cost * 1e9));
  for (auto& o : along) {  // made again at no extra cost
    record_event(*o, MemoryEventKind::Remat);
    ++db.stats.rematerializations;
    db.stats.rematerialized_bytes += int64_t(o->block->size);
    o->last_use = clock(db);
  }
}

// Makes an evicted cell's bytes again from its recipe (recursively bringing back its inputs).
void rematerialize(Cell& c) {
  auto& db = device_budget(c.device);
  MG_CHECK(c.recomputable, Error,
           "budget: a storage was evicted but its recipe can no longer run (an internal error of the budget runtime)");
  // The inputs first, then the bytes of `c`: along a chain of evicted cells only one link's
  // inputs and output are held at a time.
  std::vector<std::shared_ptr<Cell>> inputs;
  struct Unlock {
    Cell& c;
    std::vector<std::shared_ptr<Cell>>& inputs;
    ~Unlock() {
      --c.locks;
      for (auto& i : inputs) --i->locks;
    }
  } unlock{c, inputs};
  ++c.locks;
  // The evicted inputs, latest first (what was made from the others brings them back on its way, or
  // finds them resident), then the resident ones, which are not held while the others are made.
  std::vector<std::shared_ptr<Cell>> order;
  for (auto& call : c.recipe)
    for (auto& a : call->args)
      if (a.read && std::find(order.begin(), order.end(), a.read) == order.end()) order.push_back(a.read);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a->resident() != b->resident() ? b->resident() : !a->resident() && a->id < b->id;
  });
  for (auto& in : order) {
    ensure_resident(*in);
    ++in->locks;
    inputs.push_back(in);
  }
  c.block = allocate_for(c);
  record_event(c, MemoryEventKind::Remat);
  const int64_t t0 = now_ns();
  try {
    for (auto& call : c.recipe) replay(*call, c);
  } catch (...) {
    release_block(c);
    throw;
  }
  ++db.stats.rematerializations;
  db.stats.rematerialized_bytes += int64_t(c.block->size);
  db.stats.recompute_seconds += seconds_since(t0);
  for (auto& call : c.recipe) db.stats.recompute_flops += call->flops, db.stats.modeled_seconds += call->modeled;
}
}  // namespace

void ensure_resident(Cell& c) {
  c.last_use = clock(device_budget(c.device));
  if (c.offloaded())
    fetch(c);
  else if (c.fresh && !c.resident())  // dropped before it was written: empty bytes again
    c.block = allocate_for(c);
  else if (!c.resident())
    rematerialize(c);
  await_arrival(c);
}

// ---- in-place writes

// `c` no longer can be recomputed (an input changed, or its pointer went out). An evicted cell
// then is lost, and so is whatever would have been recomputed from it; resident readers simply
// keep their values and lose their recipes.
void drop_recipe(Cell& c) {
  if (!c.recomputable && c.recipe.empty()) return;
  const bool lost = c.evicted();
  c.recomputable = false;
  auto recipe = std::move(c.recipe);  // destroyed at the end: may free input cells
  c.recipe.clear();
  c.cost = 0;
  if (!lost) return;
  ++device_budget(c.device).stats.banished;
  auto dependents = std::move(c.dependents);
  c.dependents.clear();
  for (auto& w : dependents)
    if (auto d = w.lock())
      for (auto& call : d->recipe)
        if (call->reads(&c)) {
          drop_recipe(*d);
          break;
        }
}

// Live cells whose recipes read `c` (the list may hold stale entries: readers that lost their recipe).
std::vector<std::shared_ptr<Cell>> readers(Cell& c) {
  std::vector<std::shared_ptr<Cell>> r;
  for (auto& w : c.dependents)
    if (auto d = w.lock())
      for (auto& call : d->recipe)
        if (call->reads(&c)) {
          r.push_back(d);
          break;
        }
  return r;
}

// Before `x` changes in place: every evicted storage a user can still touch whose recipe would read
// x's old value (directly or through other evicted cells) is brought back now; then every reader of
// x loses its recipe (the evicted ones no handle refers to are dropped with theirs).
void before_overwrite(Cell& x) {
  std::vector<std::shared_ptr<Cell>> rescued;
  for (int round = 0; round < 64; ++round) {
    std::vector<std::shared_ptr<Cell>> frontier = readers(x), needed;
    std::unordered_set<Cell*> seen;
    while (!frontier.empty()) {
      auto d = frontier.back();
      frontier.pop_back();
      if (!d->evicted() || !seen.insert(d.get()).second) continue;
      if (d->has_storage || d->user_pinned) needed.push_back(d);
      for (auto& e : readers(*d)) frontier.push_back(e);
    }
    if (needed.empty()) break;
    for (auto& d : needed) {
      ensure_resident(*d);
      ++d->locks;  // kept until x's readers have lost their recipes
      rescued.push_back(d);
    }
  }
  for (auto& d : readers(x)) drop_recipe(*d);
  x.dependents.clear();
  for (auto& d : rescued) --d->locks;
}

// Readers come and go (a weight is read by every step's activations): dead entries are swept
// whenever the list doubles.
void add_dependent(Cell& input, const std::weak_ptr<Cell>& reader) {
  auto& d = input.dependents;
  if (d.size() >= 16 && (d.size() & (d.size() - 1)) == 0)
    d.erase(std::remove_if(d.begin(), d.end(), [](const std::weak_ptr<Cell>& w) { return w.expired(); }), d.end());
  d.push_back(reader);
}

}  // namespace impl

bool detail::replaying() { return impl::t_replaying > 0; }

}  // namespace mg::budget
