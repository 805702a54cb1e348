// Choosing what leaves: when the allocator's pressure hook asks for room, the resident cell with the
// smallest DTR score is evicted (or offloaded, where moving it out and back is cheaper).
#include <cmath>

#include <memgrad/core/budget/cell_impl.h>

namespace mg::budget {

namespace impl {

// Frees the bytes of a resident cell that can be recomputed and joins it to the classes of its
// evicted neighbours. `counted`: an eviction under pressure (a dead handle's free is not one).
void evict(Cell& c, bool counted) {
  auto& db = device_budget(c.device);
  if (counted) {
    ++db.stats.evictions;
    db.stats.evicted_bytes[size_t(c.block->category)] += int64_t(c.block->size);
    record_event(c, MemoryEventKind::Evict);
  }
  release_block(c);
  c.cls = std::make_shared<ClassNode>();
  c.cls->cost = c.cost;
  for_each_neighbour(c, [&](Cell& n) {
    if (n.evicted() && n.cls) unite(c.cls, n.cls);
  });
}

namespace {
std::string minimum_message(DeviceBudget& db, const Device& d, size_t request) {
  const MemoryStats s = memory_stats(d);
  int64_t unmovable = 0;
  for (Cell* c : db.cells)
    if (c->block && !may_evict(*c, db.options.remat) && !may_offload(*c, db.options.offload) &&
        !pinned_category(c->block->category))
      unmovable += int64_t(c->block->size);
  const int64_t pinned =
      s.category(Category::Parameter) + s.category(Category::Gradient) + s.category(Category::OptimizerState);
  const int64_t working = std::max<int64_t>(db.stats.largest_working_set, int64_t(memory::round_size(request)));
  const int64_t minimum = pinned + working;
  return mg::detail::str(
      "memory budget of ", format_bytes(s.limit), " on ", d, " is too small: ", format_bytes(int64_t(request)),
      " more would not fit and nothing left can be evicted or offloaded. A step needs at least ", format_bytes(minimum),
      " (", minimum, " B): parameters ", format_bytes(s.category(Category::Parameter)), " + gradients ",
      format_bytes(s.category(Category::Gradient)), " + optimizer state ",
      format_bytes(s.category(Category::OptimizerState)), " + the largest kernel's working set ", format_bytes(working),
      db.stats.largest_working_set_kernel.empty() ? "" : " (" + db.stats.largest_working_set_kernel + ")",
      "; besides those, ", format_bytes(unmovable),
      " are held by tensors that cannot leave now (pinned, read through data pointers, or in use)",
      db.options.offload == Offload::None ? "; --offload activations can move tensors that cannot be recomputed" : "");
}
}  // namespace

bool relieve(const Device& d, size_t bytes) {
  if (d.is_meta() || !detail::active(d)) return false;
  if (prefetching()) throw PrefetchRefused{};
  Lock g(mu());
  auto& db = device_budget(d);
  const int64_t now = clock(db);
  const double bandwidth = host_bandwidth(db);
  Cell* best = nullptr;
  bool best_offload = false;
  double best_score = INFINITY;
  for (Cell* c : db.cells) {
    const bool can_evict = may_evict(*c, db.options.remat), can_offload = may_offload(*c, db.options.offload);
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
    throw MemoryBudgetError(minimum_message(db, d, bytes),
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
