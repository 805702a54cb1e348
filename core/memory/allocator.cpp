// The allocator's front door: allocate and release, labelled by the thread's scopes (category,
// owner, op), and the pressure hook a memory budget installs. The pools, the ledger, the limit, the
// history and the devices' states are its other files (allocator_impl.h lists them).
#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/memory/allocator_impl.h>
#include <memgrad/core/memory/trace.h>

namespace mg {

namespace {

using namespace memory::impl;

std::atomic<int64_t> g_fail_countdown{0};                 // fail_allocation_after
std::atomic<bool (*)(const Device&)> g_manages{nullptr};  // the pressure hook (set_pressure_hook)
std::atomic<bool (*)(const Device&, size_t)> g_relieve{nullptr};

// What this thread's scopes say about its allocations, read and set on every op. The initial-exec
// TLS model makes an access one instruction rather than a __tls_get_addr call (the default in a
// shared library); it takes a few bytes of the static TLS block, which glibc keeps spare for that.
struct ThreadScopes {
  std::optional<Category> category;
  memory::OwnerId owner_id = 0;  // t_owner interned
  Op op = Op::none;
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadScopes t_scopes;
thread_local std::string t_owner;  // the owner label, joined with '.'

}  // namespace

// prev_owner_len_ is read only where the scope pushed a label (the id then changed): a scope that
// only sets the category leaves the thread's label string alone.
MemoryScope::MemoryScope(Category c)
    : prev_category_(t_scopes.category), prev_owner_len_(0), prev_owner_id_(t_scopes.owner_id) {
  t_scopes.category = c;
}
MemoryScope::MemoryScope(const std::string& owner)
    : prev_category_(t_scopes.category), prev_owner_len_(t_owner.size()), prev_owner_id_(t_scopes.owner_id) {
  if (owner.empty()) return;
  t_owner += (t_owner.empty() ? "" : ".") + owner;
  t_scopes.owner_id = memory::intern_owner(t_owner);
}
MemoryScope::MemoryScope(Category c, const std::string& owner) : MemoryScope(owner) { t_scopes.category = c; }
MemoryScope::~MemoryScope() {
  ThreadScopes& t = t_scopes;
  t.category = prev_category_;
  if (t.owner_id == prev_owner_id_) return;
  t_owner.resize(prev_owner_len_);
  t.owner_id = prev_owner_id_;
}

Category current_category(Category fallback) { return t_scopes.category.value_or(fallback); }
const std::string& current_owner() { return t_owner; }

OpScope::OpScope(Op op) : prev_(t_scopes.op) { t_scopes.op = op; }
OpScope::~OpScope() { t_scopes.op = prev_; }

namespace memory {

Op current_op() { return t_scopes.op; }

void fail_allocation_after(int64_t n) {
  MG_CHECK(n >= 0, ValueError, "fail_allocation_after: expected a count >= 0, got ", n);
  g_fail_countdown = n;
}
int64_t allocations_until_failure() { return g_fail_countdown.load(); }

void set_pressure_hook(const PressureHook& hook) {
  MG_CHECK(!hook.manages == !hook.relieve, ValueError, "set_pressure_hook: expected both functions or neither");
  g_relieve.store(hook.relieve, std::memory_order_release);
  g_manages.store(hook.manages, std::memory_order_release);
}

Block* allocate(const Device& d, size_t nbytes, Category fallback) {
  check_device_usable(d);
  DeviceState& s = state(d);
  Block req;  // what is asked for; it becomes a (recycled) Block once a chunk is found
  auto* b = &req;
  b->requested = nbytes;
  b->size = nbytes > memory::kMaxRequest ? nbytes : round_size(nbytes);
  b->device = d;
  const ThreadScopes& t = t_scopes;
  b->category = t.category.value_or(fallback);
  b->op = t.op == Op::none ? nullptr : op_name(t.op);
  b->owner_id = t.owner_id || !b->op ? t.owner_id : op_owner(t.op);
  // The block belongs to the stream it is allocated on (on cuda, the thread's current stream).
  cuda::Stream stream = d.is_cuda() ? cuda::current_stream(d.index) : cuda::Stream();
  std::unique_lock<std::mutex> g(s.mu);
  if (nbytes > memory::kMaxRequest) throw_oom(s, *b, stream, 0, OomCause::TooLarge);
  int64_t countdown = g_fail_countdown.load();
  while (countdown > 0 && !g_fail_countdown.compare_exchange_weak(countdown, countdown - 1)) {
  }
  if (countdown == 1) throw_oom(s, *b, stream, 0, OomCause::Injected);
  // Under a memory budget (the pressure hook) a request past the limit first makes room: the budget
  // evicts or offloads one storage at a time (outside this lock: it frees blocks) until it fits.
  const auto manages = g_manages.load(std::memory_order_acquire);
  const bool budgeted = manages && manages(d);
  Chunk* c = take_chunk(s, *b, stream, budgeted);
  while (!c) {
    g.unlock();
    bool relieved = false;
    try {
      relieved = g_relieve.load(std::memory_order_acquire)(d, b->size);
    } catch (const MemoryBudgetError& e) {
      std::lock_guard<std::mutex> again(s.mu);
      ++s.stats.num_ooms;
      record(s, MemoryEventKind::Oom, int64_t(b->size), 0, b, Category::Other, {}, nullptr, nullptr, e.fragmentation());
      throw;
    }
    g.lock();
    c = take_chunk(s, *b, stream, relieved);
  }
  if (s.spare_blocks.empty()) {
    b = new Block(req);
  } else {
    b = s.spare_blocks.back();
    s.spare_blocks.pop_back();
    *b = req;
  }
  c->block = b;
  b->chunk = c;
  b->ptr = reinterpret_cast<void*>(c->addr);
  s.stats.active += int64_t(c->size);
  s.stats.peak_active = std::max(s.stats.peak_active, s.stats.active);
  account_alloc(s, *b, +1);
  record(s, MemoryEventKind::Alloc, int64_t(b->size), c->addr, b);
  if (s.trace) {
    s.traced[b] = s.trace->allocations;
    s.trace->events.push_back({s.trace->allocations++, nbytes, b->category, true});
  }
  return b;
}

void release(Block* b) {
  if (!b) return;
  DeviceState& s = state_of(b);
  {
    std::lock_guard<std::mutex> g(s.mu);
    Chunk* c = b->chunk;
    account_alloc(s, *b, -1);  // the ledger counts the bytes freed now, even when reuse must wait
    record(s, MemoryEventKind::Free, int64_t(b->size), c->addr, b);
    if (s.trace)
      if (auto it = s.traced.find(b); it != s.traced.end()) {
        s.trace->events.push_back({it->second, 0, b->category, false});
        s.traced.erase(it);
      }
    c->block = nullptr;
    // Work queued on other streams may still use the bytes: an event on each, and the chunk stays
    // out of the pools (still active, still reserved) until all have completed.
    for (const cuda::Stream& use : c->uses)
      if (void* event = cuda::record_event(s.device.index, use.handle())) {
        s.events.emplace_back(event, c);
        ++c->pending;
      }
    c->uses.clear();
    if (c->pending == 0) free_chunk(s, c);
    if (s.spare_blocks.size() < DeviceState::kSpares && !s.detached) return s.spare_blocks.push_back(b);
  }
  delete b;
}

void record_stream(const Block* b, const cuda::Stream& stream) {
  if (!b || !b->device.is_cuda()) return;  // one stream off cuda: nothing is ever deferred
  DeviceState& s = state_of(b);
  std::lock_guard<std::mutex> g(s.mu);
  Chunk* c = b->chunk;
  // Work on the block's own stream is ordered before any later use of the block: nothing to wait for.
  if (stream.handle() == c->segment->stream.handle()) return;
  for (const cuda::Stream& use : c->uses)
    if (use.handle() == stream.handle()) return;
  c->uses.push_back(stream);
}

}  // namespace memory

}  // namespace mg
