// The cost model: DTR's equivalence classes and score (cost / (bytes x staleness)), the clock
// staleness is counted on, which cells may leave at all, and the modeled rates (CostModel).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <memgrad/core/budget/cell_impl.h>

namespace mg::budget::impl {

using Clock = std::chrono::steady_clock;
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

bool pinned_category(Category c) {
  return c == Category::Parameter || c == Category::Gradient || c == Category::OptimizerState;
}

int64_t clock(const DeviceBudget& db) { return db.options.cost == Cost::Modeled ? db.modeled_ns : now_ns(); }
double host_bandwidth(const DeviceBudget& db) {
  if (db.options.cost == Cost::Modeled) return db.options.model.host_bytes_per_second;
  return db.stats.bandwidth > 0 ? db.stats.bandwidth : 1e10;
}

namespace {
bool may_leave(const Cell& c) { return c.block && c.locks == 0 && !c.user_pinned && !c.exposed && !c.fresh; }
}  // namespace
// Allocated and not yet written: nothing to keep, and nobody holds its pointer yet (a kernel takes it
// when it runs, locking it; a running kernel's own scratch is in use): its bytes can go and come back
// empty. The op that made it allocates its output before its kernel brings back the inputs, so at
// the floor the output must be able to wait for them.
bool may_drop(const Cell& c) {
  return c.fresh && c.block && c.locks == 0 && !c.scratch && !c.user_pinned && !c.exposed &&
         !pinned_category(c.block->category);
}
bool may_offload(const Cell& c, Offload o) {
  if (o == Offload::None || !may_leave(c)) return false;
  const bool state = c.block->category == Category::OptimizerState;
  if (state) return o == Offload::Optimizer || o == Offload::All;
  return !pinned_category(c.block->category) && (o == Offload::Activations || o == Offload::All);
}
bool may_evict(const Cell& c, Remat r) {
  return r == Remat::Dynamic && may_leave(c) && c.recomputable && !pinned_category(c.block->category) &&
         !(c.gradient && c.has_storage);
}

// DTR's cost of evicting `c` (its "evicted neighbourhood", Kirisame et al. 2021, counted exactly
// rather than by their union-find approximation): bringing it back replays its recipe and, first,
// those of the evicted storages it reads, transitively (each once), and fetches the offloaded ones;
// each evicted storage that reads it and is wanted would need it back once more. Union-find classes,
// which never split, merged a chain's whole evicted history into one class near the floor, so every
// candidate cost the same and a backward gradient went first, to be rebuilt from the loss.
//
// A storage no handle refers to any more is needed only to recompute evicted readers: with none,
// evicting it costs nothing now. Priced at its own recompute time, such leftovers of a
// rematerialization outlived the saved tensors around them, so that rebuilding a chain evicted the
// previous links and each backward step rebuilt the chain from its start.
double recompute_cost(Cell& c) {
  if (c.fresh) return 0;
  int wanted_readers = 0;
  for (auto& r : readers(c)) wanted_readers += r->evicted();
  if (!c.has_storage && wanted_readers == 0) return 0;
  static uint64_t walks = 0;
  const uint64_t walk = ++walks;
  const double bandwidth = host_bandwidth(device_budget(c.device));
  double cost = c.cost;
  std::vector<Cell*> stack{&c};
  while (!stack.empty()) {
    Cell* x = stack.back();
    stack.pop_back();
    for (auto& call : x->recipe)
      for (auto& a : call->args) {
        Cell* in = a.read.get();
        if (!in || in == x || in->visited == walk || in->resident()) continue;
        in->visited = walk;
        if (in->offloaded()) {
          cost += double(in->nbytes) / bandwidth;
        } else {
          cost += in->cost;
          stack.push_back(in);
        }
      }
  }
  return cost * (1 + wanted_readers);
}

}  // namespace mg::budget::impl

namespace mg::budget {

std::string CostModel::str() const {
  char b[160];
  std::snprintf(b, sizeof b, "%.3g GFLOP/s, %.3g GB/s, %.3g us a kernel, host copies %.3g GB/s",
                flops_per_second * 1e-9, bytes_per_second * 1e-9, seconds_per_kernel * 1e6,
                host_bytes_per_second * 1e-9);
  return b;
}

}  // namespace mg::budget
