// A planned step: the storages first written since begin_step() numbered in order (the key of a
// Directive), the step's trace for a planner (Options::trace), and a per-tensor plan carried out:
// each directed storage leaves after its planned kernel and comes back when a kernel touches it.
#include <algorithm>
#include <unordered_set>

#include <memgrad/core/budget/cell_impl.h>

namespace mg::budget {

namespace impl {

namespace {

int64_t rounded(size_t nbytes) { return int64_t(memory::round_size(nbytes)); }
bool this_step(const DeviceBudget& db, const Cell& c) { return c.birth >= 0 && c.step == db.step; }

// What recomputing `c` before a kernel would take now, in the trace's terms (StepTrace::Use): the
// walk of rematerialize(), which replays c's recipe after bringing back the freed storages it reads.
void price_recompute(const DeviceBudget& db, Cell& c, StepTrace::Use& u) {
  if (!c.recomputable) return;
  std::unordered_set<const Cell*> seen{&c};
  std::vector<Cell*> stack{&c};
  double seconds = 0;
  int64_t bytes = 0;
  while (!stack.empty()) {
    Cell* x = stack.back();
    stack.pop_back();
    for (auto& call : x->recipe) {
      seconds += call->modeled;
      for (const Arg& a : call->args) {
        if (!a.defined) continue;
        if (!a.read) {  // another output of the call: made too, in scratch or in place
          if (a.written_id != x) bytes += rounded(a.nbytes);
          continue;
        }
        Cell* in = a.read.get();
        if (!seen.insert(in).second) continue;
        if (in->resident()) {
          if (this_step(db, *in)) u.needs.push_back(in->birth);
        } else if (in->offloaded()) {
          seconds += db.options.model.copy_seconds(double(in->nbytes));  // fetched
          bytes += rounded(in->nbytes);
        } else if (in->recomputable) {
          bytes += rounded(in->nbytes);
          stack.push_back(in);
        } else {
          return;  // lost: c cannot be made again
        }
      }
    }
  }
  u.recompute_seconds = seconds, u.recompute_bytes = bytes;
}

// Sends `c` away as `action` says, where it can leave now.
bool leave(Cell& c, Directive::Action action) {
  if (!c.block || c.locks > 0 || c.user_pinned || c.exposed || c.fresh || pinned_category(c.block->category))
    return false;
  if (action == Directive::Action::Offload) {
    offload(c);
    return true;
  }
  if (!c.recomputable || (c.gradient && c.has_storage)) return false;
  evict(c, true);
  return true;
}

}  // namespace

void note_uses(DeviceBudget& db, const std::vector<std::shared_ptr<Cell>>& arguments) {
  std::unordered_set<const Cell*> seen;
  for (const auto& c : arguments) {
    if (!c || !this_step(db, *c) || !seen.insert(c.get()).second) continue;
    StepTrace::Storage& s = db.trace.storages[size_t(c->birth)];
    s.saved |= detail::category(*c) == Category::Activation;
    s.gradient = c->gradient;
    StepTrace::Use u;
    u.kernel = db.kernel;
    price_recompute(db, *c, u);
    s.uses.push_back(std::move(u));
  }
}

void kernel_done(DeviceBudget& db, const Device& d, const char* name, const std::vector<Cell*>& fresh, double modeled) {
  if (!db.stepping) return;
  for (Cell* c : fresh) {
    c->birth = db.births++, c->step = db.step;
    if (db.options.trace) {
      StepTrace::Storage s;
      s.birth = c->birth, s.kernel = name, s.bytes = rounded(c->nbytes), s.nbytes = int64_t(c->nbytes);
      s.uses.push_back({db.kernel, -1, 0, {}});
      db.trace.storages.push_back(std::move(s));
    }
    auto it = db.directive_of.find(c->birth);
    if (it == db.directive_of.end()) continue;
    const Directive& x = *it->second;
    if (x.bytes == rounded(c->nbytes) && x.kernel == name && x.leave_after >= db.kernel)
      db.leaving.emplace(x.leave_after, std::make_pair(c->self, &x));
    else
      ++db.stats.directives_missed;
  }
  if (db.options.trace) {
    const MemoryStats m = memory_stats(d);
    db.trace.kernels.push_back({name, m.peak_reserved, m.peak_allocated, modeled});
    reset_peak(d);
  }
  auto [first, last] = db.leaving.equal_range(db.kernel);
  for (auto it = first; it != last; ++it) {
    auto c = it->second.first.lock();
    if (!c || !leave(*c, it->second.second->action)) ++db.stats.directives_missed;
  }
  db.leaving.erase(db.kernel);
  // Storages no handle refers to that a recompute made again leave as they did when their handles
  // went (storage_died): a plan's recompute holds them only while it runs, as the trace priced it.
  if (!db.options.directives.empty() && db.stats.rematerializations != db.rematerializations_seen) {
    db.rematerializations_seen = db.stats.rematerializations;
    std::vector<Cell*> leftovers;
    for (Cell* c : db.cells)
      if (!c->has_storage && c->recomputable && c->block && c->locks == 0 && !c->fresh) leftovers.push_back(c);
    std::sort(leftovers.begin(), leftovers.end(), [](Cell* a, Cell* b) { return a->id < b->id; });  // as on meta
    for (Cell* c : leftovers) evict(*c, false);
  }
  ++db.kernel;
}

void note_death(DeviceBudget& db, const Cell& c) {
  if (db.options.trace && this_step(db, c)) db.trace.storages[size_t(c.birth)].died = db.kernel;
}

}  // namespace impl

using namespace impl;

void begin_step(const Device& d) {
  Lock g(mu());
  auto& db = device_budget(d);
  ++db.step;
  db.stepping = true;
  db.kernel = db.births = 0;
  db.leaving.clear();
  if (!db.options.trace) return;
  db.trace = StepTrace();
  reset_peak(d);
}

StepTrace trace(const Device& d) {
  Lock g(mu());
  return device_budget(d).trace;
}

}  // namespace mg::budget
