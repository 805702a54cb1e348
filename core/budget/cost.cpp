// The cost model: DTR's equivalence classes and score (cost / (bytes x staleness)), the clock
// staleness is counted on, and which cells may leave at all.
#include <algorithm>

#include <memgrad/core/budget/cell_impl.h>

namespace mg::budget::impl {

using Clock = std::chrono::steady_clock;
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::shared_ptr<ClassNode> find(std::shared_ptr<ClassNode> n) {
  while (n->parent) {
    if (n->parent->parent) n->parent = n->parent->parent;  // path halving
    n = n->parent;
  }
  return n;
}
void unite(const std::shared_ptr<ClassNode>& a, const std::shared_ptr<ClassNode>& b) {
  auto ra = find(a), rb = find(b);
  if (ra == rb) return;
  rb->parent = ra;
  ra->cost += rb->cost;
}

bool pinned_category(Category c) {
  return c == Category::Parameter || c == Category::Gradient || c == Category::OptimizerState;
}

int64_t clock(const DeviceBudget& db) { return db.options.cost == Cost::Modeled ? db.modeled_ns : now_ns(); }
double host_bandwidth(const DeviceBudget& db) {
  if (db.options.cost == Cost::Modeled) return kModeledBytesPerSecond;
  return db.stats.bandwidth > 0 ? db.stats.bandwidth : 1e10;
}

namespace {
bool may_leave(const Cell& c) { return c.block && c.locks == 0 && !c.user_pinned && !c.exposed && !c.fresh; }
}  // namespace
bool may_offload(const Cell& c, Offload o) {
  if (o == Offload::None || !may_leave(c)) return false;
  const bool state = c.block->category == Category::OptimizerState;
  if (state) return o == Offload::Optimizer || o == Offload::All;
  return !pinned_category(c.block->category) && (o == Offload::Activations || o == Offload::All);
}
bool may_evict(const Cell& c, Remat r) {
  return r == Remat::Dynamic && may_leave(c) && c.recomputable && !pinned_category(c.block->category);
}

// DTR's cost of evicting `c`: its own recompute time plus that of the evicted classes around it
// (bringing it back brings them back too). A storage no handle refers to any more is needed only to
// recompute evicted readers: with none, evicting it costs nothing now (a reader evicted later counts
// it through its class). Pricing such leftovers of a rematerialization at their own recompute time
// made them outlive the saved tensors around them, so that rebuilding a chain evicted the previous
// links and each backward step rebuilt the chain from its start.
double recompute_cost(Cell& c) {
  if (!c.has_storage) {
    bool needed = false;
    for (auto& r : readers(c)) needed |= r->evicted();
    if (!needed) return 0;
  }
  double cost = c.cost;
  std::vector<ClassNode*> counted;
  for_each_neighbour(c, [&](Cell& n) {
    if (!n.evicted() || !n.cls) return;
    auto root = find(n.cls);
    if (std::find(counted.begin(), counted.end(), root.get()) != counted.end()) return;
    counted.push_back(root.get());
    cost += std::max(0.0, root->cost);
  });
  return cost;
}

}  // namespace mg::budget::impl
