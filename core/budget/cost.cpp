// The cost model: DTR's equivalence classes and score (cost / (bytes x staleness)), the clock
// staleness is counted on, which cells may leave at all, and the modeled rates (CostModel,
// calibrated on this machine by calibrate()).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <memgrad/core/budget/cell_impl.h>
#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/ops.h>

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

namespace {
double two_digits(double v) {
  if (!(v > 0)) return v;
  const double scale = std::pow(10.0, std::floor(std::log10(v)) - 1);
  return std::round(v / scale) * scale;
}
// The best of `runs` timings of f (seconds), after one untimed run.
template <class F>
double best_of(int runs, const Device& d, F&& f) {
  auto sync = [&] {
    if (d.is_cuda()) cuda::synchronize(d.index);
  };
  f();
  sync();
  double best = INFINITY;
  for (int i = 0; i < runs; ++i) {
    const int64_t t0 = impl::now_ns();
    f();
    sync();
    best = std::min(best, impl::seconds_since(t0));
  }
  return best;
}
}  // namespace

CostModel calibrate(const Device& d) {
  MG_CHECK(d.is_cpu() || d.is_cuda(), DeviceError, "budget::calibrate: expected a cpu or cuda device, got ", d);
  NoGradGuard no_grad;
  MemoryScope scope(Category::Workspace, "budget.calibrate");
  const auto on = TensorOptions().device(d);
  CostModel m;
  {
    const int64_t n = 512;
    Tensor a = ones({n, n}, on), b = ones({n, n}, on);
    m.flops_per_second = 2.0 * double(n * n * n) / best_of(3, d, [&] { (void)matmul(a, b); });
  }
  {
    const int64_t n = int64_t(1) << 22;  // 16 MiB a tensor: streams from memory, not the caches
    Tensor a = ones({n}, on), b = ones({n}, on);
    m.bytes_per_second = 3.0 * double(n) * 4 / best_of(3, d, [&] { (void)add(a, b); });
  }
  {
    Tensor a = ones({16}, on), b = ones({16}, on);
    const int reps = 200;
    m.seconds_per_kernel = best_of(3, d,
                                   [&] {
                                     for (int i = 0; i < reps; ++i) (void)add(a, b);
                                   }) /
                           reps;
  }
  {
    const size_t n = size_t(16) << 20;
    auto host = impl::host_alloc(d, n);
    std::memset(host.get(), 1, n);
    Tensor dev = empty({int64_t(n)}, TensorOptions(kBool).device(d));
    void* p = dev.raw_data();
    const double s = best_of(3, d, [&] {
      if (d.is_cuda()) {
        cuda::copy(p, host.get(), n, cuda::CopyKind::HostToDevice, d.index);
        cuda::copy(host.get(), p, n, cuda::CopyKind::DeviceToHost, d.index);
      } else {
        std::memcpy(p, host.get(), n);
        std::memcpy(host.get(), p, n);
      }
    });
    m.host_bytes_per_second = 2.0 * double(n) / s;
  }
  m.flops_per_second = two_digits(m.flops_per_second);
  m.bytes_per_second = two_digits(m.bytes_per_second);
  m.seconds_per_kernel = two_digits(m.seconds_per_kernel);
  m.host_bytes_per_second = two_digits(m.host_bytes_per_second);
  return m;
}

}  // namespace mg::budget
