// The budget runtime's private parts (core/budget/budget.h is its public face), shared by its files:
//   cells.cpp       a managed storage's bytes (a Cell): Storage's hooks, moving a block in and out
//   kernel_run.cpp  recipes recorded from kernel runs (what each written storage was made by)
//   replay.cpp      rematerialization by replaying recipes, and the rescue before an in-place write
//   eviction.cpp    choosing what leaves under pressure (the allocator's pressure hook) and evicting it
//   cost.cpp        the cost model: DTR's score, equivalence classes, the clock (measured or modeled)
//   offload.cpp     the host pool: offload, fetch and prefetch, on a side stream on cuda
//   floor.cpp       the floor: what each kernel needs resident, per mode, and the message below it
//   planned.cpp     a planned step: storages numbered from begin_step, its trace, per-storage directives
//   enable.cpp      enable, disable, pin, stats
// Everything here runs under mu(), the runtime's one (recursive) lock.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <memgrad/core/budget/budget.h>
#include <memgrad/core/budget/runtime_impl.h>
#include <memgrad/core/cuda.h>

namespace mg::budget {

namespace impl {

// ---- recipes (kernel_run.cpp records them, replay.cpp runs them)

// One tensor argument of a recorded kernel call: a read input keeps its cell alive; a written one
// is only named (a recipe never keeps its own outputs alive).
struct Arg {
  std::shared_ptr<Cell> read;
  std::weak_ptr<Cell> written;
  const Cell* written_id = nullptr;  // identity of the written cell (valid while it lives)
  bool defined = false;
  size_t nbytes = 0;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  DType dtype = kFloat32;
};
struct Call {
  const char* kernel = "";
  detail::Replay replay;
  std::vector<Arg> args;
  double flops = 0;
  double cost = 0;     // seconds to run it again: as measured, or as modeled (Cost::Modeled)
  double modeled = 0;  // the cost model's seconds (Stats::modeled_seconds)
  bool reads(const Cell* c) const {
    for (auto& a : args)
      if (a.read.get() == c) return true;
    return false;
  }
};

}  // namespace impl

// A managed storage's bytes: resident (a ledger block, or wrapped user memory), evicted (nothing, a
// recipe to make them again) or offloaded (a copy in the host pool), and how it relates to others.
struct Cell {
  Device device;
  uint64_t id = 0;  // creation order on its device: breaks ties between equal scores the same way each run
  size_t nbytes = 0;
  Block* block = nullptr;   // resident ledger bytes
  void* wrapped = nullptr;  // resident user memory (from_blob): never leaves
  std::function<void(void*)> deleter;
  std::shared_ptr<void> host;          // the offloaded copy (host pool), when offloaded
  std::optional<cuda::Event> arrival;  // cuda: a copy in on the side stream not yet waited for
  Category category = Category::Other;
  std::string owner;
  std::vector<std::shared_ptr<impl::Call>> recipe;  // replayed in order to make the bytes again
  bool recomputable = false;                        // recipe is complete and its inputs still hold the values it read
  std::vector<std::weak_ptr<Cell>> dependents;      // cells whose recipes read this one
  bool fresh = false;                               // allocated, not written by any kernel yet
  bool exposed = false;                             // its pointer was handed out outside kernels
  bool user_pinned = false;
  bool has_storage = true;  // a Storage (user handle) still refers to it
  bool scratch = false;     // allocated by a running kernel (its scratch)
  bool gradient = false;    // made in backward from a gradient (detail::mark_gradient)
  int locks = 0;            // arguments of a running kernel or recipe
  double cost = 0;          // seconds to recompute (its recipe calls' costs)
  int64_t last_use = 0;
  int64_t birth = -1;  // its index among the storages first written in step `step` (begin_step)
  uint64_t step = 0;
  uint64_t visited = 0;  // the last walk of the recipe graph that counted it (cost.cpp)
  std::weak_ptr<Cell> self;

  bool resident() const { return block || wrapped; }
  bool offloaded() const { return host != nullptr; }
  bool evicted() const { return !resident() && !offloaded(); }
  void* ptr() const { return block ? block->ptr : wrapped; }
  ~Cell();
};

namespace impl {

// ---- cells.cpp

std::recursive_mutex& mu();
using Lock = std::lock_guard<std::recursive_mutex>;

// What one kernel run needs resident in each mode (floor.cpp): its arguments and, beside them, what
// cannot leave in that mode; its scratch is added when it has run.
struct KernelNeed {
  const char* kernel = "";
  int64_t arguments[2][4] = {};   // [remat][offload]: optimizer state stepped on the host is not resident
  CategoryBytes held[2][4] = {};  // [remat][offload]
  std::vector<std::pair<std::string, int64_t>> tensors;
  int64_t bytes(int r, int o) const;
};

// Sums for a least-squares fit of the cost model to measured kernel times (fit_cost_model).
struct KernelFit {
  double n = 0, f = 0, b = 0, t = 0, ff = 0, bb = 0, fb = 0, ft = 0, bt = 0;
  void add(double flops, double bytes, double seconds) {
    n += 1, f += flops, b += bytes, t += seconds;
    ff += flops * flops, bb += bytes * bytes, fb += flops * bytes, ft += flops * seconds, bt += bytes * seconds;
  }
};

struct DeviceBudget {
  std::atomic<bool> on{false};
  Options options;
  Stats stats;
  std::unordered_set<Cell*> cells;
  int64_t modeled_ns = 0;  // the modeled clock: the modeled time of every kernel run so far
  uint64_t cells_made = 0;
  Floor floors[2][4];                         // [remat][offload], since enable or reset_stats
  std::optional<KernelNeed> running;          // the kernel run in progress (its scratch not yet known)
  int64_t scratch_now = 0, scratch_peak = 0;  // bytes of scratch cells alive, and their peak in a run
  KernelFit fit;                              // the kernels run since enable or reset_stats (fit_cost_model)
  // The step since begin_step (planned.cpp): kernels run, storages first written, the directives
  // of those storages by the kernel after which they leave, and the trace.
  bool stepping = false;  // begin_step was called since enable
  uint64_t step = 0;
  int64_t kernel = 0, births = 0;
  int64_t rematerializations_seen = 0;  // Stats::rematerializations when leftovers were last freed
  std::unordered_map<int64_t, const Directive*> directive_of;  // by birth, into options.directives
  std::unordered_multimap<int64_t, std::pair<std::weak_ptr<Cell>, const Directive*>> leaving;
  StepTrace trace;
};
DeviceBudget& device_budget(const Device& d);
// Adds a budget event (Evict, Remat, Offload, Fetch) about `c` to the allocator's history.
void record_event(const Cell& c, MemoryEventKind kind);
// A ledger block for `c`'s bytes, under its category and owner (may make room by evicting others).
Block* allocate_for(Cell& c);
// Gives `c`'s resident block back to the allocator, keeping its category and owner in the cell.
void release_block(Cell& c);

// ---- cost.cpp

int64_t now_ns();
inline double seconds_since(int64_t t0) { return double(now_ns() - t0) * 1e-9; }
// Now, in nanoseconds: wall-clock time, or (Cost::Modeled) the modeled time of the kernels run so far.
int64_t clock(const DeviceBudget& db);
double host_bandwidth(const DeviceBudget& db);
// Parameters, gradients and optimizer state never leave.
bool pinned_category(Category c);
bool may_offload(const Cell& c, Offload o);
bool may_evict(const Cell& c, Remat r);
bool may_drop(const Cell& c);  // fresh: allocated, not written yet (leaves in any mode, costs nothing)
// DTR's cost of evicting `c`: what bringing it back would take (its recipe and the evicted storages
// it reads, transitively), once for itself and once more for each wanted evicted storage that reads it.
double recompute_cost(Cell& c);
// The least-squares rates of the kernels summed in `k` (rates positive; the per-kernel term takes what
// they leave, so the fitted times add up to the measured sum), over `m`'s other fields.
CostModel fit_rates(const KernelFit& k, CostModel m);
// ---- eviction.cpp

// Frees the bytes of a resident cell that can be recomputed and joins it to the classes of its
// evicted neighbours. `counted`: an eviction under pressure (a dead handle's free is not one).
void evict(Cell& c, bool counted);
// The allocator's pressure hook (memory::PressureHook, installed by enable): an allocation of `bytes`
// on `d` does not fit under the limit even after the cache was released; evicts or offloads one
// storage and returns true, or returns false when `d` is not under a budget. Raises MemoryBudgetError
// when nothing can leave.
bool relieve(const Device& d, size_t bytes);

// ---- offload.cpp

// Host-pool bytes: page-locked on cuda, plain aligned memory on cpu (outside the device's ledger).
std::shared_ptr<void> host_alloc(const Device& d, size_t n);
void release_host_cache();  // frees the cpu host-pool buffers kept for reuse
size_t host_cache_bytes();  // their bytes
void add_host_bytes(DeviceBudget& db, int64_t n);
void offload(Cell& c);
void fetch(Cell& c);
// The compute stream waits for a copy in before the first kernel that touches the cell.
void await_arrival(Cell& c);
// Optimizer state offloaded on cpu is used where it is (the step runs on the host pool): on `d`
// (a cpu, or meta standing for one), and for `c`, offloaded optimizer state there.
bool steps_on_host(const Device& d);
bool stays_on_host(const Cell& c);
// True on this thread while a prefetch allocates: it is refused rather than making room.
bool prefetching();
struct PrefetchRefused {};

// ---- floor.cpp

// What the kernel about to run with `arguments` (distinct cells) needs resident, in every mode.
KernelNeed kernel_need(DeviceBudget& db, const char* kernel, const std::vector<std::shared_ptr<Cell>>& arguments);
// The kernel has run, allocating `scratch` bytes at most: the floors take its needs.
void note_floor(DeviceBudget& db, const KernelNeed& need, int64_t scratch);
// The MemoryBudgetError's message: the floor of the mode, what sets it, and what holds the bytes now.
std::string floor_message(DeviceBudget& db, const Device& d, size_t request);

// ---- planned.cpp

// The kernel about to run has `arguments` (distinct cells): with Options::trace, their uses.
void note_uses(DeviceBudget& db, const std::vector<std::shared_ptr<Cell>>& arguments);
// The kernel `name` has run (its arguments unlocked), writing `fresh` first: they are numbered
// (Directive::birth) and traced, and the storages planned to leave after it leave.
void kernel_done(DeviceBudget& db, const Device& d, const char* name, const std::vector<Cell*>& fresh, double modeled);
// `c`'s last handle went: the trace notes when.
void note_death(DeviceBudget& db, const Cell& c);

// ---- replay.cpp

// Brings `c`'s bytes back (fetched, or recomputed from its recipe) and marks it used now.
void ensure_resident(Cell& c);
// `c` can no longer be recomputed; an evicted cell is then lost, and so is what needs it.
void drop_recipe(Cell& c);
// Before `x` changes in place: rescues what would be recomputed from its old value.
void before_overwrite(Cell& x);
void add_dependent(Cell& input, const std::weak_ptr<Cell>& reader);
// Live cells whose recipes read `c`.
std::vector<std::shared_ptr<Cell>> readers(Cell& c);

}  // namespace impl
}  // namespace mg::budget
