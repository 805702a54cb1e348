// Choosing what leaves: when the allocator's pressure hook asks for room, the resident cell with the
// smallest DTR score is evicted (or offloaded, where moving it out and back is cheaper).
#include <cmath>

#include <memgrad/core/budget/cell_impl.h>

namespace mg::budget {

namespace impl {

// Frees the bytes of a resident cell that can be recomputed. `counted`: an eviction under pressure
// (a dead handle's free is not one).
void evict(Cell& c, bool counted) {
  auto& db = device_budget(c.device);
  if (counted) {
    ++db.stats.evictions;
    db.stats.evicted_bytes[size_t(c.block->category)] += int64_t(c.block->size);
    record_event(c, MemoryEventKind::Evict);
  }
  release_block(c);
}

bool relieve(const Device& d, size_t bytes) {
  if (!detail::active(d)) return false;
  if (prefetching()) throw PrefetchRefused{};
  Lock g(mu());
  auto& db = device_budget(d);
  const int64_t now = clock(db);
  const double bandwidth = host_bandwidth(db);
  Cell* best = nullptr;
  bool best_offload = false;
  double best_score = INFINITY;
  for (Cell* c : db.cells) {
    const bool can_evict = may_evict(*c, db.options.remat) || may_drop(*c),
               can_offload = may_offload(*c, db.options.offload);
    if (!can_evict && !can_offload) continue;
    const double size = double(c->block->size), stale = double(std::max<int64_t>(1, now - c->last_use)) * 1e-9;
    // Out and back again: twice the bytes over the bandwidth.
    const double move = can_offload ? 2 * size / bandwidth : INFINITY;
    const double remat = can_evict ? recompute_cost(*c) : INFINITY;
    const double score = std::min(move, remat) / (size * stale);
    if (score < best_score || (score == best_score && best && c->id < best->id))
      best = c, best_score = score, best_offload = move < remat;
  }
  if (!best)  // with the allocator's forensics: why its cache cannot serve the request either
    throw MemoryBudgetError(floor_message(db, d, bytes),
                            std::make_shared<const Fragmentation>(fragmentation(d, int64_t(bytes))));
  auto keep = best->self.lock();  // offload/evict must not destroy it midway
  if (best_offload)
    offload(*best);
  else
    evict(*best, true);
  return true;
}

}  // namespace impl
}  // namespace mg::budget
