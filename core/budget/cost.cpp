// The cost model: DTR's equivalence classes and score (cost / (bytes x staleness)), the clock
// staleness is counted on, which cells may leave at all, and the modeled rates (CostModel, fitted to
// this machine's kernel times by fit_cost_model()).
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

CostModel fit_rates(const KernelFit& k, CostModel m) {
  if (k.n < 1) return m;
  // t = x f + y b + z over the kernels; a rate that comes out non-positive is dropped and the rest
  // fitted again (x: seconds a FLOP, y: seconds a byte, z: seconds a kernel).
  double x = 0, y = 0, z = 0;
  auto solve3 = [&] {
    const double a[3][4] = {{k.ff, k.fb, k.f, k.ft}, {k.fb, k.bb, k.b, k.bt}, {k.f, k.b, k.n, k.t}};
    auto det = [](double m00, double m01, double m02, double m10, double m11, double m12, double m20, double m21,
                  double m22) {
      return m00 * (m11 * m22 - m12 * m21) - m01 * (m10 * m22 - m12 * m20) + m02 * (m10 * m21 - m11 * m20);
    };
    const double D = det(a[0][0], a[0][1], a[0][2], a[1][0], a[1][1], a[1][2], a[2][0], a[2][1], a[2][2]);
    if (std::fabs(D) < 1e-300) return false;
    x = det(a[0][3], a[0][1], a[0][2], a[1][3], a[1][1], a[1][2], a[2][3], a[2][1], a[2][2]) / D;
    y = det(a[0][0], a[0][3], a[0][2], a[1][0], a[1][3], a[1][2], a[2][0], a[2][3], a[2][2]) / D;
    z = det(a[0][0], a[0][1], a[0][3], a[1][0], a[1][1], a[1][3], a[2][0], a[2][1], a[2][3]) / D;
    return true;
  };
  // Two unknowns u, v over sums (uu, uv, vv, ut, vt).
  auto solve2 = [](double uu, double uv, double vv, double ut, double vt, double& u, double& v) {
    const double D = uu * vv - uv * uv;
    if (std::fabs(D) < 1e-300) return false;
    u = (ut * vv - uv * vt) / D, v = (uu * vt - uv * ut) / D;
    return true;
  };
  if (!solve3() || x <= 0 || y <= 0 || z < 0) {
    x = y = z = 0;
    double u = 0, v = 0;
    if (solve2(k.ff, k.f, k.n, k.ft, k.t, u, v) && u > 0 && v >= 0)  // FLOPs and a launch cost
      x = u, z = v;
    else if (k.ff > 0)
      x = std::max(0.0, k.ft / k.ff);
    const double rest_t = k.t - x * k.f - z * k.n;  // what the FLOPs and launches leave, in bytes
    y = k.b > 0 ? std::max(0.0, rest_t / k.b) : 0;
  }
  // A rate the fit dropped keeps `m`'s. The fitted times add up to the measured sum, whichever branch
  // fitted them (a plan of the same kernels must predict what they took): the rates' remainder is the
  // per-kernel term, and rates that overshoot the sum shrink to it.
  if (x <= 0) x = 1 / m.flops_per_second;
  if (y <= 0) y = 1 / m.bytes_per_second;
  const double by_rates = x * k.f + y * k.b;
  if (by_rates > k.t && k.t > 0)
    x *= k.t / by_rates, y *= k.t / by_rates, z = 0;
  else
    z = std::max(0.0, k.t - by_rates) / k.n;
  m.flops_per_second = 1 / x, m.bytes_per_second = 1 / y, m.seconds_per_kernel = z;
  return m;
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

CostModel fit_cost_model(const Device& d, double outside, const CostModel& base) {
  impl::Lock g(impl::mu());
  const impl::DeviceBudget& db = impl::device_budget(d);
  CostModel m = base;
  if (db.stats.bandwidth > 0) m.host_bytes_per_second = db.stats.bandwidth;
  if (d.is_meta() || db.fit.n < 3) return m;
  m = impl::fit_rates(db.fit, m);
  m.seconds_per_kernel += std::max(0.0, outside);
  return m;
}

}  // namespace mg::budget
