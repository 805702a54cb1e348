// The public API of the memory budget (budget.h): enable and disable a device, pin, stats. As cost.cpp,
// floor.cpp and planned.cpp do for the rest of budget.h, it defines them over the runtime's private
// parts (cell_impl.h), which use budget.h's types: budget.h sits below those parts, its definitions
// above them, and so no file is named budget.cpp.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <memgrad/core/budget/cell_impl.h>
#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/storage_impl.h>

namespace mg::budget {

using namespace impl;

void enable(const Device& d, const Options& options) {
  MG_CHECK(options.limit >= 0, ValueError, "budget::enable: expected a limit in bytes >= 0 (0: none), got ",
           options.limit);
  const CostModel& m = options.model;
  MG_CHECK(m.flops_per_second > 0 && m.bytes_per_second > 0 && m.host_bytes_per_second > 0 && m.seconds_per_kernel >= 0,
           ValueError, "budget::enable: expected a cost model with positive rates, got ", m.str());
  Lock g(mu());
  auto& db = device_budget(d);
  memory::set_pressure_hook({&detail::active, &relieve});  // the budget's one entrance from the allocator
  mg::detail::set_storage_budget(
      {[](const Device& x) { return detail::any_active() && detail::active(x); },  // and Storage's
       &detail::adopt, &detail::data, &detail::block, &detail::set_category, &detail::category, &detail::set_owner,
       &detail::storage_died});
  set_memory_limit(d, options.limit);
  db.options = options;
  db.stepping = false, db.directive_of.clear(), db.leaving.clear();
  for (const Directive& x : db.options.directives) db.directive_of[x.birth] = &x;
  if (d.is_meta()) db.options.cost = Cost::Modeled;  // no kernel runs on meta: only the model has times
  if (!db.on.exchange(true)) ++detail::g_active_devices;
  // Measured once: the copy bandwidth to the host pool and back (what an offload costs). The
  // other side of the choice, recompute, is priced by each recorded kernel's own measured time.
  if (db.stats.bandwidth == 0 && !d.is_meta()) {
    const size_t n = size_t(4) << 20;
    auto host = host_alloc(d, n);
    std::memset(host.get(), 1, n);
    Block* dev = d.is_cuda() ? memory::allocate(d, n, Category::Workspace) : nullptr;
    std::shared_ptr<void> other(d.is_cuda() ? nullptr : std::aligned_alloc(memory::kRoundBytes, n),
                                [](void* p) { std::free(p); });
    // Out and back three times, the fastest kept: the first pays for touching fresh pages, which a
    // step's copies (into memory the allocator and malloc hand out again) mostly do not.
    double fastest = INFINITY;
    for (int i = 0; i < 3; ++i) {
      const int64_t t0 = now_ns();
      if (dev) {
        cuda::copy(dev->ptr, host.get(), n, cuda::CopyKind::HostToDevice, d.index);
        cuda::copy(host.get(), dev->ptr, n, cuda::CopyKind::DeviceToHost, d.index);
      } else {
        std::memcpy(other.get(), host.get(), n);
        std::memcpy(host.get(), other.get(), n);
      }
      fastest = std::min(fastest, seconds_since(t0));
    }
    db.stats.bandwidth = 2.0 * double(n) / std::max(1e-9, fastest);
    memory::release(dev);
  }
}

void disable(const Device& d) {
  Lock g(mu());
  auto& db = device_budget(d);
  if (!db.on.load()) return;
  std::vector<std::shared_ptr<Cell>> live, back;
  for (Cell* c : db.cells)
    if (auto p = c->self.lock()) live.push_back(p);
  // Everything a handle refers to comes back, and stays (held) while the rest comes back; only then
  // do recipes go: dropping an evicted leftover's recipe first would lose the evicted storages made
  // from it.
  struct Release {
    std::vector<std::shared_ptr<Cell>>& cells;
    ~Release() {
      for (auto& c : cells) --c->locks;
    }
  } release{back};
  for (auto& c : live)
    if (c->has_storage && !c->resident()) {
      ensure_resident(*c);
      ++c->locks;
      back.push_back(c);
    }
  for (auto& c : live) {
    drop_recipe(*c);
    c->dependents.clear();
  }
  if (d.is_cpu()) release_host_cache();
  db.on = false;
  --detail::g_active_devices;
}

bool enabled(const Device& d) { return detail::active(d); }
Options options(const Device& d) {
  Lock g(mu());
  return device_budget(d).options;
}

void pin(const Tensor& t) {
  MG_CHECK(t.defined(), ValueError, "budget::pin: expected a defined tensor");
  Lock g(mu());
  if (const auto& c = t.storage()->budget_cell()) {
    ensure_resident(*c);
    c->user_pinned = true;
  }
}

bool is_resident(const Tensor& t) {
  MG_CHECK(t.defined(), ValueError, "budget::is_resident: expected a defined tensor");
  Lock g(mu());
  const auto& c = t.storage()->budget_cell();
  return !c || c->resident();
}

Stats stats(const Device& d) {
  Lock g(mu());
  return device_budget(d).stats;
}

void reset_stats(const Device& d) {
  Lock g(mu());
  auto& s = device_budget(d).stats;
  Stats fresh;
  fresh.bandwidth = s.bandwidth;
  fresh.host_bytes = fresh.peak_host_bytes = s.host_bytes;
  s = fresh;
  for (auto& by_offload : device_budget(d).floors)
    for (Floor& f : by_offload) f = Floor();
  device_budget(d).fit = KernelFit();
}

std::string stats_report(const Device& d) {
  const Stats s = stats(d);
  auto by_category = [](const CategoryBytes& b) {
    std::string r;
    for (int c = 0; c < kNumCategories; ++c)
      if (b[size_t(c)])
        r += mg::detail::str(r.empty() ? "" : ", ", category_name(Category(c)), " ", format_bytes(b[size_t(c)]));
    return r.empty() ? std::string("none") : r;
  };
  int64_t evicted = 0, offloaded = 0;
  for (int c = 0; c < kNumCategories; ++c)
    evicted += s.evicted_bytes[size_t(c)], offloaded += s.offloaded_bytes[size_t(c)];
  char times[160];
  std::snprintf(times, sizeof times, "%.3f s recomputing (%.3g matmul FLOP), %.3f s copying", s.recompute_seconds,
                s.recompute_flops, s.transfer_seconds);
  return mg::detail::str("evicted ", format_bytes(evicted), " in ", s.evictions, " evictions (",
                         by_category(s.evicted_bytes), "); rematerialized ", format_bytes(s.rematerialized_bytes),
                         " in ", s.rematerializations, " recomputes; offloaded ", format_bytes(offloaded), " in ",
                         s.offloads, " copies (", by_category(s.offloaded_bytes), "), fetched back ", s.fetches, " (",
                         s.prefetches, " ahead of use)", "; host pool peak ", format_bytes(s.peak_host_bytes), "; ",
                         times, "; largest kernel working set ", format_bytes(s.largest_working_set),
                         s.largest_working_set_kernel.empty() ? "" : " (" + s.largest_working_set_kernel + ")");
}

}  // namespace mg::budget
