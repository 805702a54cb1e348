// The budget runtime (core/budget.h): cells, recipes recorded from kernel runs, DTR eviction with
// equivalence classes, rematerialization, offload to the host pool, and the in-place-write rescue.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_set>

#include <memgrad/core/budget.h>
#include <memgrad/core/budget/runtime_impl.h>
#include <memgrad/core/cuda.h>
#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/flops.h>

namespace mg::budget {

namespace {

using Clock = std::chrono::steady_clock;
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
double seconds_since(int64_t t0) { return double(now_ns() - t0) * 1e-9; }

// The DTR equivalence classes: evicted cells that touch each other share one node whose cost is
// the sum of their recompute costs (union-find; a rematerialized cell subtracts its cost).
struct ClassNode {
  std::shared_ptr<ClassNode> parent;
  double cost = 0;
};
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
  double cost = 0;  // seconds to run it again: as measured, or as modeled (Cost::Modeled)
  bool reads(const Cell* c) const {
    for (auto& a : args)
      if (a.read.get() == c) return true;
    return false;
  }
};

bool pinned_category(Category c) {
  return c == Category::Parameter || c == Category::Gradient || c == Category::OptimizerState;
}

struct DeviceBudget;
DeviceBudget& device_budget(const Device& d);

}  // namespace

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
  std::vector<std::shared_ptr<Call>> recipe;    // replayed in order to make the bytes again
  bool recomputable = false;                    // recipe is complete and its inputs still hold the values it read
  std::vector<std::weak_ptr<Cell>> dependents;  // cells whose recipes read this one
  bool fresh = false;                           // allocated, not written by any kernel yet
  bool exposed = false;                         // its pointer was handed out outside kernels
  bool user_pinned = false;
  bool has_storage = true;  // a Storage (user handle) still refers to it
  int locks = 0;            // arguments of a running kernel or recipe
  double cost = 0;          // seconds to recompute (its recipe calls' costs)
  int64_t last_use = 0;
  std::shared_ptr<ClassNode> cls;  // its equivalence class while evicted
  std::weak_ptr<Cell> self;

  bool resident() const { return block || wrapped; }
  bool offloaded() const { return host != nullptr; }
  bool evicted() const { return !resident() && !offloaded(); }
  void* ptr() const { return block ? block->ptr : wrapped; }
  ~Cell();
};

namespace detail {
std::atomic<int> g_active_devices{0};
std::atomic<int> g_kernel_depth{0};
thread_local int t_kernel_depth = 0;
}  // namespace detail

namespace {

std::recursive_mutex& mu() {
  static auto* m = new std::recursive_mutex;  // never destroyed: storages die during static destruction
  return *m;
}
using Lock = std::lock_guard<std::recursive_mutex>;
thread_local int t_replaying = 0;
thread_local bool t_prefetching = false;  // a prefetch's allocation: refused rather than making room
struct PrefetchRefused {};

struct DeviceBudget {
  std::atomic<bool> on{false};
  Options options;
  Stats stats;
  std::unordered_set<Cell*> cells;
  int64_t modeled_ns = 0;  // the modeled clock: the modeled time of every kernel run so far
  uint64_t cells_made = 0;
};

constexpr int kMaxDevices = 65;  // cpu, cuda:0..63
DeviceBudget& device_budget(const Device& d) {
  static auto* all = new DeviceBudget[kMaxDevices];
  int i = d.is_cuda() ? 1 + d.index : 0;
  MG_CHECK(!d.is_meta() && i >= 0 && i < kMaxDevices, DeviceError, "budget: expected a cpu or cuda device, got ", d);
  return all[i];
}

// Now, in nanoseconds: wall-clock time, or (Cost::Modeled) the modeled time of the kernels run so far.
int64_t clock(const DeviceBudget& db) { return db.options.cost == Cost::Modeled ? db.modeled_ns : now_ns(); }
double host_bandwidth(const DeviceBudget& db) {
  if (db.options.cost == Cost::Modeled) return kModeledBytesPerSecond;
  return db.stats.bandwidth > 0 ? db.stats.bandwidth : 1e10;
}

void record_event(const Cell& c, MemoryEventKind kind) {
  memory::record_event(c.device, kind, int64_t(memory::round_size(c.nbytes)), reinterpret_cast<uintptr_t>(c.ptr()),
                       c.category, c.owner);
}

// ---- moving bytes

Block* allocate_for(Cell& c) {
  Block* b;
  {
    MemoryScope scope(c.category);
    b = memory::allocate(c.device, c.nbytes, c.category);
  }
  memory::set_owner(b, c.owner);
  return b;
}

void release_block(Cell& c) {
  c.category = c.block->category;
  c.owner = c.block->owner();
  memory::release(c.block);  // a copy in still running on the side stream holds the bytes until it ends
  c.block = nullptr;
  c.arrival.reset();
}

void drop_recipe(Cell& c);

// Neighbours of `c` in the graph of recipes: the cells its recipe reads and the cells that read it.
template <class F>
void for_each_neighbour(Cell& c, F&& f) {
  for (auto& call : c.recipe)
    for (auto& a : call->args)
      if (a.read && a.read.get() != &c) f(*a.read);
  for (auto& w : c.dependents)
    if (auto d = w.lock()) f(*d);
}

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

// Host-pool bytes: page-locked on cuda (so copies can overlap), plain aligned memory on cpu. Either
// way outside the device's ledger: the pool is accounted in Stats::host_bytes.
std::shared_ptr<void> host_alloc(const Device& d, size_t n) {
  if (d.is_cuda()) {
    Tensor t = cuda::empty_pinned({int64_t(n)}, kBool);
    void* p = t.raw_data();
    return std::shared_ptr<void>(p, [t](void*) {});
  }
  void* p = std::aligned_alloc(memory::kRoundBytes, memory::round_size(n));
  MG_CHECK(p, OutOfMemoryError, "budget: the host pool could not allocate ", format_bytes(int64_t(n)));
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

void add_host_bytes(DeviceBudget& db, int64_t n) {
  db.stats.host_bytes += n;
  db.stats.peak_host_bytes = std::max(db.stats.peak_host_bytes, db.stats.host_bytes);
}

// cuda: transfers run on a side stream, after the work queued on the compute stream so far. A block
// copied out goes back to the allocator at once, marked as used on the side stream (it is reused
// only when the copy has finished); a copy in makes the compute stream wait for it, and its host
// bytes are released once the copy has completed.
struct SideStream {
  cuda::Stream stream;
  std::vector<std::pair<cuda::Event, std::shared_ptr<void>>> in_flight;  // host bytes of copies in
};
SideStream& side(const Device& d) {
  static auto* all = new std::map<int, SideStream>;
  auto it = all->find(d.index);
  if (it == all->end()) it = all->emplace(d.index, SideStream{cuda::Stream::create(d.index), {}}).first;
  auto& f = it->second.in_flight;  // copies in that have completed free their host bytes
  f.erase(std::remove_if(f.begin(), f.end(), [](const auto& e) { return e.first.query(); }), f.end());
  return it->second;
}
Tensor bytes_view(void* p, size_t n, const Device& d) {
  return make_tensor(std::make_shared<Storage>(p, n, d, nullptr), {int64_t(n)}, {1}, 0, kBool);
}
void copy_on_side(Cell& c, void* host, bool out) {
  SideStream& s = side(c.device);
  cuda::Event queued;
  queued.record(cuda::current_stream(c.device.index));
  queued.wait(s.stream);
  {
    cuda::StreamGuard guard(s.stream);
    Tensor dev = bytes_view(c.block->ptr, c.nbytes, c.device), pinned = bytes_view(host, c.nbytes, kCPU);
    out ? cuda::copy_async(pinned, dev) : cuda::copy_async(dev, pinned);
  }
  memory::record_stream(c.block, s.stream);  // the block is reused only after the copy
  if (out) return;
  cuda::Event arrived;
  arrived.record(s.stream);
  c.arrival = arrived;  // waited for by the compute stream when a kernel touches the cell
  s.in_flight.emplace_back(arrived, c.host);
}

// The compute stream waits for a copy in before the first kernel that touches the cell.
void await_arrival(Cell& c) {
  if (!c.arrival) return;
  c.arrival->wait(cuda::current_stream(c.device.index));
  c.arrival.reset();
}

void offload(Cell& c) {
  auto& db = device_budget(c.device);
  const int64_t t0 = now_ns();
  c.host = host_alloc(c.device, c.nbytes);
  if (c.device.is_cuda())
    copy_on_side(c, c.host.get(), true);
  else
    std::memcpy(c.host.get(), c.block->ptr, c.nbytes);
  ++db.stats.offloads;
  db.stats.offloaded_bytes[size_t(c.block->category)] += int64_t(c.block->size);
  add_host_bytes(db, int64_t(memory::round_size(c.nbytes)));
  record_event(c, MemoryEventKind::Offload);
  release_block(c);
  db.stats.transfer_seconds += seconds_since(t0);
}

void fetch(Cell& c) {
  auto& db = device_budget(c.device);
  ++c.locks;  // the allocation below may evict others, never this one
  Block* b = nullptr;
  try {
    b = allocate_for(c);
  } catch (...) {
    --c.locks;
    throw;
  }
  --c.locks;
  const int64_t t0 = now_ns();
  c.block = b;
  if (c.device.is_cuda())
    copy_on_side(c, c.host.get(), false);
  else
    std::memcpy(b->ptr, c.host.get(), c.nbytes);
  c.host.reset();
  add_host_bytes(db, -int64_t(memory::round_size(c.nbytes)));
  ++db.stats.fetches;
  record_event(c, MemoryEventKind::Fetch);
  db.stats.transfer_seconds += seconds_since(t0);
}

void ensure_resident(Cell& c);

// Optimizer state offloaded on cpu is used where it is: the step runs on the host pool (ZeRO-Offload's
// split; on cpu the host is the device's processor), so it is never copied back for a kernel.
bool stays_on_host(const Cell& c) {
  return c.offloaded() && c.device.is_cpu() && c.category == Category::OptimizerState;
}

// Builds the tensor a replayed kernel sees for argument `a`.
Tensor view_of(const Arg& a, void* ptr, const Device& d) {
  return make_tensor(std::make_shared<Storage>(ptr, a.nbytes, d, nullptr), a.shape, a.strides, a.offset, a.dtype);
}

// Runs `call` again so that `target` (resident, locked) gets the bytes the call wrote into it.
// Other outputs of the call go to scratch that is dropped; inputs are brought back and locked.
void replay(const Call& call, Cell& target) {
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Cell>> locked;
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
    throw;
  }
  --t_replaying;
  if (call.flops > 0) {
    RecomputeScope recompute;
    count_flops(call.flops);
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
  for (auto& call : c.recipe)
    for (auto& a : call->args)
      if (a.read && std::find(inputs.begin(), inputs.end(), a.read) == inputs.end()) {
        ensure_resident(*a.read);
        ++a.read->locks;
        inputs.push_back(a.read);
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
  for (auto& call : c.recipe) db.stats.recompute_flops += call->flops;
  if (c.cls) find(c.cls)->cost -= c.cost;
  c.cls.reset();
}

void ensure_resident(Cell& c) {
  c.last_use = clock(device_budget(c.device));
  if (c.offloaded())
    fetch(c);
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

// ---- choosing what leaves

bool may_leave(const Cell& c) { return c.block && c.locks == 0 && !c.user_pinned && !c.exposed && !c.fresh; }
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

Cell::~Cell() {
  Lock g(mu());
  device_budget(device).cells.erase(this);
  if (block) memory::release(block);
  if (host) add_host_bytes(device_budget(device), -int64_t(memory::round_size(nbytes)));
  if (deleter) deleter(wrapped);
}

namespace detail {

bool active(const Device& d) { return !d.is_meta() && device_budget(d).on.load(std::memory_order_relaxed); }
bool replaying() { return t_replaying > 0; }

std::shared_ptr<Cell> adopt(const Device& d, size_t nbytes, Block* block, void* wrapped,
                            std::function<void(void*)> deleter, bool fresh) {
  Lock g(mu());
  auto c = std::make_shared<Cell>();
  c->device = d;
  c->nbytes = nbytes;
  c->block = block;
  c->wrapped = block ? nullptr : wrapped;
  c->deleter = std::move(deleter);
  c->fresh = fresh && block;
  if (block) c->category = block->category, c->owner = block->owner();
  c->last_use = clock(device_budget(d));
  c->id = ++device_budget(d).cells_made;
  c->self = c;
  device_budget(d).cells.insert(c.get());
  return c;
}

void* data(Cell& c) {
  const bool in_kernel = g_kernel_depth.load(std::memory_order_relaxed) > 0;
  if (in_kernel && c.resident()) return c.ptr();
  Lock g(mu());
  if (!in_kernel) {  // the caller may write through the pointer or keep it: it stays, as it is
    if (!c.exposed) {
      before_overwrite(c);
      ensure_resident(c);
      c.exposed = true;
      c.fresh = false;
      drop_recipe(c);
    }
  } else if (stays_on_host(c)) {
    return c.host.get();
  }
  ensure_resident(c);
  return c.ptr();
}

const Block* block(const Cell& c) { return c.block; }

void set_category(Cell& c, Category category) {
  Lock g(mu());
  c.category = category;
  if (c.block) memory::set_category(c.block, category);
  // Pinned from now on: its recipe (and the graph it keeps) is of no more use.
  if (pinned_category(category) && c.resident()) drop_recipe(c);
}

Category category(const Cell& c) { return c.block ? c.block->category : c.category; }

void set_owner(Cell& c, const std::string& owner) {
  Lock g(mu());
  c.owner = owner;
  if (c.block) memory::set_owner(c.block, owner);
}

void storage_died(std::shared_ptr<Cell> c) {
  Lock g(mu());
  c->has_storage = false;
  if (c.use_count() == 1) return;  // nobody's recipe reads it: freed with the cell below
  if (c->recomputable && c->block && c->locks == 0) evict(*c, false);
  if (c->offloaded() && c->recomputable) {  // a recipe can make it again: the host copy can go
    c->host.reset();
    add_host_bytes(device_budget(c->device), -int64_t(memory::round_size(c->nbytes)));
    c->cls = std::make_shared<ClassNode>();
    c->cls->cost = c->cost;
  }
}

void prefetch(const std::vector<std::weak_ptr<Storage>>& storages) {
  Lock g(mu());
  for (auto& w : storages) {
    auto s = w.lock();
    if (!s || !active(s->device())) continue;
    auto& db = device_budget(s->device());
    const std::shared_ptr<Cell>& c = s->budget_cell();
    if (!db.options.prefetch || !c || !c->offloaded() || stays_on_host(*c)) continue;
    const MemoryStats m = memory_stats(c->device);
    if (m.limit > 0 && m.allocated + int64_t(memory::round_size(c->nbytes)) > m.limit) continue;
    struct Prefetching {
      Prefetching() { t_prefetching = true; }
      ~Prefetching() { t_prefetching = false; }
    } scope;
    try {
      fetch(*c);
      c->last_use = clock(db);
      ++db.stats.prefetches;
    } catch (const PrefetchRefused&) {  // it did not fit: the kernel that reads it fetches it
    }
  }
}

bool relieve(const Device& d, size_t bytes) {
  if (d.is_meta() || !active(d)) return false;
  if (t_prefetching) throw PrefetchRefused{};
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
  if (!best) throw MemoryBudgetError(minimum_message(db, d, bytes));
  auto keep = best->self.lock();  // offload/evict must not destroy it midway
  if (best_offload)
    offload(*best);
  else
    evict(*best, true);
  return true;
}

// ---- kernel runs

struct KernelRun::State {
  Device device;
  const char* kernel;
  std::vector<Tensor> tensors;
  std::vector<bool> written;
  Replay replay;
  double flops = 0;
  std::vector<std::shared_ptr<Cell>> cells;  // per tensor (null: undefined or not managed)
  std::vector<std::shared_ptr<Cell>> locked;
};

KernelRun::KernelRun(const Device& d, const char* kernel, std::vector<Tensor> tensors, std::vector<bool> written,
                     Replay replay, double flops)
    : s_(new State{d, kernel, std::move(tensors), std::move(written), std::move(replay), flops, {}, {}}) {}

KernelRun::~KernelRun() {
  Lock g(mu());
  for (auto& c : s_->locked) --c->locks;
}

void KernelRun::run(const std::function<void()>& body) {
  State& s = *s_;
  const size_t n = s.tensors.size();
  {
    Lock g(mu());
    auto& db = device_budget(s.device);
    s.cells.resize(n);
    for (size_t i = 0; i < n; ++i)
      if (s.tensors[i].defined() && s.tensors[i].device() == s.device)
        s.cells[i] = s.tensors[i].storage()->budget_cell();
    // In-place writes: what would be recomputed from the old values is rescued first.
    for (size_t i = 0; i < n; ++i)
      if (s.cells[i] && s.written[i] && !s.cells[i]->fresh) before_overwrite(*s.cells[i]);
    int64_t working = 0;
    for (size_t i = 0; i < n; ++i) {
      auto& c = s.cells[i];
      if (!c || std::find(s.locked.begin(), s.locked.end(), c) != s.locked.end()) continue;
      if (!stays_on_host(*c)) ensure_resident(*c);
      ++c->locks;
      s.locked.push_back(c);
      working += int64_t(memory::round_size(c->nbytes));
    }
    if (working > db.stats.largest_working_set) {
      db.stats.largest_working_set = working;
      db.stats.largest_working_set_kernel = s.kernel;
    }
  }
  const int64_t t0 = now_ns();
  {
    KernelDepth depth;
    body();
  }
  Lock g(mu());
  auto& db = device_budget(s.device);
  // What running it again costs: its measured time, or its FLOPs and its arguments' bytes at the
  // modeled rates (Cost::Modeled), which also advance the modeled clock.
  double seconds = seconds_since(t0);
  if (db.options.cost == Cost::Modeled) {
    double bytes = 0;
    for (const Tensor& t : s.tensors)
      if (t.defined()) bytes += double(t.storage()->nbytes());
    seconds = s.flops / kModeledFlopsPerSecond + bytes / kModeledBytesPerSecond;
    db.modeled_ns += std::max<int64_t>(1, int64_t(seconds * 1e9));
  }
  // The cells the kernel wrote, and whether any of them held a value before (an in-place write).
  std::vector<Cell*> outputs;
  bool in_place = false;
  for (size_t i = 0; i < n; ++i) {
    Cell* c = s.cells[i].get();
    if (!c || !s.written[i] || std::find(outputs.begin(), outputs.end(), c) != outputs.end()) continue;
    outputs.push_back(c);
    in_place |= !c->fresh;
  }
  std::shared_ptr<Call> call;
  // A recipe must not read its own changing inputs: an in-place write is recorded only when it is the
  // call's one output (appended to that cell's recipe), and its fresh outputs get none.
  if (s.replay && (!in_place || outputs.size() == 1)) {
    call = std::make_shared<Call>();
    call->kernel = s.kernel;
    call->replay = std::move(s.replay);
    call->flops = s.flops;
    call->cost = seconds;
    for (size_t i = 0; i < n; ++i) {
      const Tensor& t = s.tensors[i];
      Arg a;
      a.defined = t.defined();
      if (a.defined) {
        a.nbytes = t.storage()->nbytes();
        a.shape = t.shape(), a.strides = t.strides(), a.offset = t.storage_offset(), a.dtype = t.dtype();
      }
      Cell* c = s.cells[i].get();
      if (c && std::find(outputs.begin(), outputs.end(), c) != outputs.end()) {
        a.written = s.cells[i];
        a.written_id = c;
      } else if (c) {
        a.read = s.cells[i];
      } else if (a.defined) {
        call.reset();  // an argument on another device or unmanaged: this call cannot be replayed
        break;
      }
      call->args.push_back(std::move(a));
    }
  }
  for (Cell* c : outputs) {
    // Parameters, gradients and optimizer state never leave for recompute: no recipe to keep.
    if (!call || (!c->fresh && !c->recomputable) || c->exposed || pinned_category(category(*c))) {
      c->fresh = false;
      drop_recipe(*c);
      continue;
    }
    if (c->fresh) c->recipe.clear(), c->cost = 0;
    c->fresh = false;
    c->recipe.push_back(call);
    c->recomputable = true;
    c->cost += call->cost;
    for (auto& a : call->args)
      if (a.read) add_dependent(*a.read, c->self);
  }
  for (size_t i = 0; i < n; ++i)  // read before any kernel wrote it: its value is not reproducible
    if (s.cells[i] && s.cells[i]->fresh) s.cells[i]->fresh = false;
  for (auto& c : s.cells)
    if (c) c->last_use = clock(db);
  // Optimizer-state offload: the state lives in the host pool between steps.
  const Offload o = db.options.offload;
  if (o == Offload::Optimizer || o == Offload::All)
    for (Cell* c : outputs)
      if (c->block && c->block->category == Category::OptimizerState && c->locks == 1 && !c->user_pinned && !c->exposed)
        offload(*c);
}

}  // namespace detail

// ---- the public API

void enable(const Device& d, const Options& options) {
  MG_CHECK(d.is_cpu() || d.is_cuda(), DeviceError, "budget::enable: expected a cpu or cuda device, got ", d);
  MG_CHECK(options.limit > 0, ValueError, "budget::enable: expected a limit in bytes > 0, got ", options.limit);
  Lock g(mu());
  auto& db = device_budget(d);
  set_memory_limit(d, options.limit);
  db.options = options;
  if (!db.on.exchange(true)) ++detail::g_active_devices;
  // Measured once: the copy bandwidth to the host pool and back (what an offload costs). The
  // other side of the choice, recompute, is priced by each recorded kernel's own measured time.
  if (db.stats.bandwidth == 0) {
    const size_t n = size_t(4) << 20;
    auto host = host_alloc(d, n);
    std::memset(host.get(), 1, n);
    Block* dev = d.is_cuda() ? memory::allocate(d, n, Category::Workspace) : nullptr;
    std::shared_ptr<void> other(d.is_cuda() ? nullptr : std::aligned_alloc(memory::kRoundBytes, n),
                                [](void* p) { std::free(p); });
    const int64_t t0 = now_ns();
    for (int i = 0; i < 2; ++i) {
      if (dev) {
        cuda::copy(dev->ptr, host.get(), n, cuda::CopyKind::HostToDevice, d.index);
        cuda::copy(host.get(), dev->ptr, n, cuda::CopyKind::DeviceToHost, d.index);
      } else {
        std::memcpy(other.get(), host.get(), n);
        std::memcpy(host.get(), other.get(), n);
      }
    }
    db.stats.bandwidth = 4.0 * double(n) / std::max(1e-9, seconds_since(t0));
    memory::release(dev);
  }
}

void disable(const Device& d) {
  Lock g(mu());
  auto& db = device_budget(d);
  if (!db.on.load()) return;
  std::vector<std::shared_ptr<Cell>> live;
  for (Cell* c : db.cells)
    if (auto p = c->self.lock()) live.push_back(p);
  for (auto& c : live) {
    if (c->has_storage && !c->resident()) ensure_resident(*c);
    drop_recipe(*c);
    c->dependents.clear();
  }
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
