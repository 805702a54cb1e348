// Cells: a managed storage's bytes, and the hooks Storage calls (adopt, data, relabel, death).
#include <memgrad/core/budget/cell_impl.h>

namespace mg::budget {

namespace detail {
std::atomic<int> g_active_devices{0};
std::atomic<int> g_kernel_depth{0};
thread_local int t_kernel_depth = 0;
}  // namespace detail

namespace impl {

std::recursive_mutex& mu() {
  static auto* m = new std::recursive_mutex;  // never destroyed: storages die during static destruction
  return *m;
}

constexpr int kMaxDevices = 66;  // cpu, cuda:0..63, meta
DeviceBudget& device_budget(const Device& d) {
  static auto* all = new DeviceBudget[kMaxDevices];
  const int i = d.is_meta() ? kMaxDevices - 1 : d.is_cuda() ? 1 + d.index : 0;
  MG_CHECK(i >= 0 && i < kMaxDevices, DeviceError, "budget: expected a cpu, cuda or meta device, got ", d);
  return all[i];
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

}  // namespace impl

using namespace impl;

Cell::~Cell() {
  Lock g(mu());
  auto& db = device_budget(device);
  db.cells.erase(this);
  if (scratch) db.scratch_now -= int64_t(memory::round_size(nbytes));
  if (block) memory::release(block);
  if (host) add_host_bytes(device_budget(device), -int64_t(memory::round_size(nbytes)));
  if (deleter) deleter(wrapped);
}

namespace detail {

bool active(const Device& d) { return device_budget(d).on.load(std::memory_order_relaxed); }

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
  auto& db = device_budget(d);
  c->last_use = clock(db);
  c->id = ++db.cells_made;
  c->self = c;
  if (block && t_kernel_depth > 0) {  // a running kernel's scratch: part of what it needs (the floor)
    c->scratch = true;
    db.scratch_now += int64_t(memory::round_size(nbytes));
    db.scratch_peak = std::max(db.scratch_peak, db.scratch_now);
  }
  db.cells.insert(c.get());
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

void mark_gradient(const Tensor& t) {
  if (!t.defined() || !active(t.device())) return;
  Lock g(mu());
  if (const auto& c = t.storage()->budget_cell()) c->gradient = true;
}

void storage_died(std::shared_ptr<Cell> c) {
  Lock g(mu());
  c->has_storage = false;
  note_death(device_budget(c->device), *c);
  if (c.use_count() == 1) return;  // nobody's recipe reads it: freed with the cell below
  if (c->recomputable && c->block && c->locks == 0) evict(*c, false);
  if (c->offloaded() && c->recomputable) {  // a recipe can make it again: the host copy can go
    c->host.reset();
    add_host_bytes(device_budget(c->device), -int64_t(memory::round_size(c->nbytes)));
  }
}

}  // namespace detail
}  // namespace mg::budget
