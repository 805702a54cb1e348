// The caching allocator and the ledger: per-device pools of segments split into chunks, the
// byte counts per category and owner, the memory limit with its OOM report, and the history.
// On cuda the pools are per stream and frees of blocks used on other streams wait for events
// (see allocator.h); on cpu and meta every segment belongs to stream 0, so nothing changes there.
#include <memgrad/core/allocator.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include <memgrad/core/budget.h>
#include <memgrad/core/budget/runtime_impl.h>
#include <memgrad/core/cuda.h>
#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/error.h>

namespace mg {

const char* category_name(Category c) {
  static const char* names[] = {"Parameter", "Gradient", "OptimizerState", "Activation",
                                "Temporary", "Input",    "Workspace",      "Other"};
  return names[size_t(c)];
}

const char* event_kind_name(MemoryEventKind k) {
  static const char* names[] = {"alloc",      "free",  "relabel", "segment_alloc", "segment_free", "oom",
                                "annotation", "evict", "remat",   "offload",       "fetch"};
  return names[size_t(k)];
}

namespace {
struct DeviceState;
}

namespace memory {
struct Segment;
// A piece of a segment: handed out (block set), waiting for other streams' events (block null,
// pending > 0), or free (then in its pool's free set).
struct Chunk {
  uintptr_t addr = 0;
  size_t size = 0;
  Segment* segment = nullptr;
  Chunk* prev = nullptr;
  Chunk* next = nullptr;
  Block* block = nullptr;
  std::vector<cuda::Stream> uses{};  // streams besides the segment's that used the live block
  int pending = 0;                   // events still outstanding since the block was released
  bool is_free() const { return !block && pending == 0; }
};
struct Segment {
  void* ptr = nullptr;
  uintptr_t base = 0;
  size_t size = 0;
  bool small = false;
  Chunk* head = nullptr;
  // The stream the segment was made for; its chunks serve only that stream. Holding the Stream keeps
  // a created stream alive while cached blocks are keyed by its handle (a new stream can't reuse it).
  cuda::Stream stream{};
  DeviceState* state = nullptr;  // the allocator it belongs to (an IsolatedAllocator's or the device's)
  uint64_t serial = 0;           // the order it was made in on its allocator
};
}  // namespace memory

namespace {

using memory::Chunk;
using memory::kRoundBytes;
using memory::kSmallRequest;
using memory::Segment;

std::atomic<int64_t> g_fail_countdown{0};  // fail_allocation_after

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

// ---- owner labels, interned (allocator.h)

struct OwnerTable {
  std::mutex mu;
  std::unordered_map<std::string, memory::OwnerId> ids{{std::string(), 0}};
  std::vector<std::unique_ptr<const std::string>> labels;  // by id; a label's address never changes
  OwnerTable() { labels.push_back(std::make_unique<const std::string>()); }
};
OwnerTable& owner_table() {
  static OwnerTable* t = new OwnerTable;  // never destroyed: blocks may be freed during static destruction
  return *t;
}

// The label of an op's outputs outside every owner scope: the op's name, interned on first use.
memory::OwnerId op_owner(Op op) {
  static std::array<std::atomic<memory::OwnerId>, size_t(Op::none) + 1> ids{};
  auto& slot = ids[size_t(op)];
  memory::OwnerId id = slot.load(std::memory_order_relaxed);
  if (id == 0) slot.store(id = memory::intern_owner(op_name(op)), std::memory_order_relaxed);
  return id;
}

uintptr_t stream_key(const Chunk* c) { return reinterpret_cast<uintptr_t>(c->segment->stream.handle()); }

// Grouped by stream (always 0 off cuda); within one, best fit: the smallest free chunk that is
// large enough; among equal sizes the oldest segment first, then the lowest offset in it. PyTorch
// breaks ties by address; the segments' order is the same wherever the device places them, so a meta
// run makes the same choices as a cpu or cuda one and predicts their reserved bytes exactly.
struct BySize {
  bool operator()(const Chunk* a, const Chunk* b) const {
    uintptr_t sa = stream_key(a), sb = stream_key(b);
    if (sa != sb) return sa < sb;
    if (a->size != b->size) return a->size < b->size;
    if (a->segment->serial != b->segment->serial) return a->segment->serial < b->segment->serial;
    return a->addr < b->addr;
  }
};
using FreeSet = std::set<Chunk*, BySize>;

struct DeviceState {
  std::mutex mu;
  Device device;
  MemoryStats stats;                      // its at_peak_by_owner stays empty: memory_stats() fills it from the ids
  std::vector<int64_t> by_owner;          // live bytes per OwnerId
  std::vector<int64_t> at_peak_by_owner;  // by_owner at the peak of allocated; see settle_peak
  bool peak_owners_pending = false;       // by_owner is still as at the peak: copy it before it changes
  // Recycled Block and Chunk objects (up to kSpares each): most allocations then call no malloc.
  static constexpr size_t kSpares = 4096;
  std::vector<Block*> spare_blocks;
  std::vector<Chunk*> spare_chunks;
  std::vector<FreeSet::node_type> spare_nodes;   // the free sets' tree nodes, extracted for reuse
  FreeSet pools[2];                              // [0] small, [1] large
  std::map<uintptr_t, Segment*> segments;        // by base address
  std::vector<std::pair<void*, Chunk*>> events;  // recorded at release on other streams (cuda only)
  uintptr_t next_meta_address = uintptr_t(1) << 40;
  uint64_t next_serial = 0;
  bool detached = false;  // an IsolatedAllocator's state whose guard ended with blocks still live
  FreeSet& pool(bool small) { return pools[small ? 0 : 1]; }
  ~DeviceState() {
    for (Block* b : spare_blocks) delete b;
    for (Chunk* c : spare_chunks) delete c;
  }
  Chunk* new_chunk(uintptr_t addr, size_t size, Segment* seg, Chunk* prev = nullptr, Chunk* next = nullptr) {
    if (spare_chunks.empty()) return new Chunk{addr, size, seg, prev, next};
    Chunk* c = spare_chunks.back();
    spare_chunks.pop_back();
    c->addr = addr, c->size = size, c->segment = seg, c->prev = prev, c->next = next;
    return c;
  }
  void pool_insert(Chunk* c) {
    FreeSet& p = pool(c->segment->small);
    if (spare_nodes.empty()) return void(p.insert(c));
    FreeSet::node_type node = std::move(spare_nodes.back());
    spare_nodes.pop_back();
    node.value() = c;
    p.insert(std::move(node));
  }
  void pool_erase(FreeSet& p, FreeSet::iterator it) {
    if (spare_nodes.size() < kSpares)
      spare_nodes.push_back(p.extract(it));
    else
      p.erase(it);
  }
  void pool_erase(Chunk* c) {
    FreeSet& p = pool(c->segment->small);
    if (auto it = p.find(c); it != p.end()) pool_erase(p, it);
  }
  void drop_chunk(Chunk* c) {  // c is out of use: no block, no uses, nothing pending
    if (spare_chunks.size() < kSpares && !detached)
      spare_chunks.push_back(c);
    else
      delete c;
  }
};

// ---- history

struct History {
  std::mutex mu;
  std::vector<MemoryEvent> ring;
  size_t capacity = 0, next = 0;
  std::chrono::steady_clock::time_point start;
};
std::atomic<bool> g_recording{false};
History& history() {
  static History* h = new History;  // never destroyed: storages may be freed during static destruction
  return *h;
}

// `previous_owner`: a Relabel's owner before (default: unchanged); `seg`: a segment event's segment.
void record(DeviceState& s, MemoryEventKind kind, int64_t bytes, uint64_t address, const Block* b,
            Category previous = Category::Other, const std::string& note = {},
            const std::string* previous_owner = nullptr, const Segment* seg = nullptr) {
  if (!g_recording.load(std::memory_order_relaxed)) return;
  MemoryEvent e;
  e.kind = kind;
  e.device = s.device;
  e.bytes = bytes;
  e.address = address;
  if (b) {
    e.requested = int64_t(std::min<size_t>(b->requested, INT64_MAX));
    e.category = b->category;
    e.owner = b->owner();
    e.op = b->op ? b->op : "";
  }
  e.previous_category = previous;
  if (kind == MemoryEventKind::Relabel) e.previous_owner = previous_owner ? *previous_owner : e.owner;
  e.small_pool = seg && seg->small;
  e.note = note;
  e.allocated = s.stats.allocated;
  e.reserved = s.stats.reserved;
  e.by_category = s.stats.by_category;
  auto& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  if (h.capacity == 0) return;
  e.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - h.start).count();
  if (h.ring.size() < h.capacity) {
    h.ring.push_back(std::move(e));
  } else {
    h.ring[h.next] = std::move(e);
  }
  h.next = (h.next + 1) % h.capacity;
}

// ---- device registry: cpu, meta, then cuda:0..63; states live until the process ends.

constexpr int kMaxCudaDevices = 64;
std::array<std::atomic<DeviceState*>, 2 + kMaxCudaDevices> g_states{};

int state_index(const Device& d) {
  if (d.is_cpu()) return 0;
  if (d.is_meta()) return 1;
  MG_CHECK(d.index >= 0 && d.index < kMaxCudaDevices, DeviceError, "allocator: expected a cuda index below ",
           kMaxCudaDevices, ", got ", d.index);
  return 2 + d.index;
}

// An IsolatedAllocator's state for this thread, per device slot (null: the device's own).
thread_local std::array<DeviceState*, 2 + kMaxCudaDevices> t_isolated{};

DeviceState& state(const Device& d) {
  const size_t index = size_t(state_index(d));
  if (DeviceState* s = t_isolated[index]) return *s;
  auto& slot = g_states[index];
  if (DeviceState* s = slot.load(std::memory_order_acquire)) return *s;
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  if (DeviceState* s = slot.load(std::memory_order_acquire)) return *s;
  auto* s = new DeviceState;
  s->device = d;
  if (const char* env = std::getenv("MG_MEMORY_LIMIT")) s->stats.limit = memory::limit_from_env(env, d.type);
  slot.store(s, std::memory_order_release);
  return *s;
}
// The allocator a live block came from.
DeviceState& state_of(const Block* b) { return *b->chunk->segment->state; }

// ---- segment source

void* source_alloc(DeviceState& s, size_t n) {
  switch (s.device.type) {
    case DeviceType::CPU:
      return std::aligned_alloc(kRoundBytes, n);
    case DeviceType::CUDA:
      return cuda::malloc(s.device.index, n);
    case DeviceType::Meta: {
      // Fake addresses are never reused; up to 2^63 (n <= kMaxRequest) every byte count fits in int64.
      if (s.next_meta_address + n > (uintptr_t(1) << 63)) return nullptr;
      void* p = reinterpret_cast<void*>(s.next_meta_address);
      s.next_meta_address += n;
      return p;
    }
  }
  return nullptr;
}

void source_free(const Device& d, void* p) {
  if (d.is_cpu())
    std::free(p);
  else if (d.is_cuda())
    cuda::free(d.index, p);
}

void free_segment(DeviceState& s, Segment* seg) {
  s.segments.erase(seg->base);
  s.stats.reserved -= int64_t(seg->size);
  --s.stats.num_segments;
  ++s.stats.num_segment_frees;
  record(s, MemoryEventKind::SegmentFree, int64_t(seg->size), seg->base, nullptr, Category::Other, {}, nullptr, seg);
  source_free(s.device, seg->ptr);
  s.drop_chunk(seg->head);
  delete seg;
}

// Returns every segment that is one free chunk; gives the bytes released.
int64_t release_cached(DeviceState& s) {
  int64_t freed = 0;
  for (auto it = s.segments.begin(); it != s.segments.end();) {
    Segment* seg = (it++)->second;
    Chunk* c = seg->head;
    if (!c->is_free() || c->next) continue;
    s.pool_erase(c);
    freed += int64_t(seg->size);
    free_segment(s, seg);
  }
  return freed;
}

// ---- ledger arithmetic

void add_category(DeviceState& s, Category c, int64_t n) {
  auto& st = s.stats;
  auto i = size_t(c);
  st.by_category[i] += n;
  st.peak_by_category[i] = std::max(st.peak_by_category[i], st.by_category[i]);
}

// The owner breakdown at the peak is copied lazily: a new peak only marks it pending, and the copy
// is made before by_owner next changes other than by a higher peak (which supersedes it), so a
// rising run of allocations copies nothing.
void settle_peak(DeviceState& s) {
  if (!s.peak_owners_pending) return;
  s.at_peak_by_owner = s.by_owner;
  s.peak_owners_pending = false;
}

void add_owner(DeviceState& s, memory::OwnerId owner, int64_t n) {
  if (owner >= s.by_owner.size()) s.by_owner.resize(size_t(owner) + 1);
  s.by_owner[owner] += n;
}

// Owner ids and their byte counts as labels, leaving out those at zero.
std::map<std::string, int64_t> by_label(const std::vector<int64_t>& bytes) {
  std::map<std::string, int64_t> r;
  for (size_t id = 0; id < bytes.size(); ++id)
    if (bytes[id]) r.emplace(memory::owner_label(memory::OwnerId(id)), bytes[id]);
  return r;
}

void account_alloc(DeviceState& s, const Block& b, int64_t sign) {
  auto& st = s.stats;
  int64_t n = sign * int64_t(b.size);
  const bool new_peak = st.allocated + n > st.peak_allocated;
  if (!new_peak) settle_peak(s);
  st.allocated += n;
  st.requested += sign * int64_t(b.requested);
  add_category(s, b.category, n);
  add_owner(s, b.owner_id, n);
  if (new_peak) {
    st.peak_allocated = st.allocated;
    st.at_peak_by_category = st.by_category;
    s.peak_owners_pending = true;
  }
  if (sign > 0) {
    ++st.num_allocs;
    st.total_allocated += n;
    st.peak_requested = std::max(st.peak_requested, st.requested);
  } else {
    ++st.num_frees;
    st.total_freed -= n;
  }
}

// ---- out of memory

enum class OomCause { Limit, DeviceRefused, TooLarge, Injected };

[[noreturn]] void throw_oom(DeviceState& s, const Block& b, size_t segment_size, OomCause cause) {
  auto& st = s.stats;
  ++st.num_ooms;
  record(s, MemoryEventKind::Oom, int64_t(std::min<size_t>(b.size, INT64_MAX)), 0, &b);
  std::string m = detail::str("out of memory on ", s.device, ": tried to allocate ", format_byte_count(b.size));
  if (b.op) m += detail::str(" in ", b.op);
  if (b.owner_id) m += detail::str(" for \"", b.owner(), "\"");
  m += " (" + std::string(category_name(b.category)) + ")";
  if (cause == OomCause::DeviceRefused)
    m += detail::str("; the device refused a segment of ", format_byte_count(segment_size));
  if (cause == OomCause::TooLarge)
    m += detail::str("; no device can address more than ", format_byte_count(memory::kMaxRequest));
  if (cause == OomCause::Injected) m += "; injected by memory::fail_allocation_after (a test hook)";
  if (st.limit > 0)
    m += detail::str("; limit ", format_bytes(st.limit), ", allocated ", format_bytes(st.allocated), ", reserved ",
                     format_bytes(st.reserved), ", free ", format_bytes(std::max<int64_t>(0, st.limit - st.reserved)),
                     " under the limit plus ", format_bytes(st.reserved - st.active), " cached in segments");
  else
    m += detail::str("; allocated ", format_bytes(st.allocated), ", reserved ", format_bytes(st.reserved));
  m += ".\nAllocated by category:";
  for (int c = 0; c < kNumCategories; ++c)
    if (st.by_category[size_t(c)])
      m += detail::str(" ", category_name(Category(c)), " ", format_bytes(st.by_category[size_t(c)]), ";");
  std::vector<std::pair<int64_t, std::string>> owners;
  for (auto& [o, n] : by_label(s.by_owner)) owners.emplace_back(n, o.empty() ? "(no owner)" : o);
  std::sort(owners.rbegin(), owners.rend());
  if (!owners.empty()) m += "\nTop owners:";
  for (size_t i = 0; i < std::min<size_t>(5, owners.size()); ++i)
    m += detail::str(" ", owners[i].second, " ", format_bytes(owners[i].first), ";");
  m += "\nWhat to try: run the model in checkpoint segments (activations are recomputed in backward instead of kept), "
       "store weights and activations in half precision (float16/bfloat16 autocast), use a smaller batch (see "
       "find_max_batch_size), or split the batch into micro-batches and accumulate their gradients before each "
       "optimizer step.";
  throw OutOfMemoryError(m);
}

// ---- pools

// Merges free chunk `c` with its free neighbours (taking them out of the pool); returns the result.
Chunk* merge(DeviceState& s, Chunk* c) {
  if (Chunk* n = c->next; n && n->is_free()) {
    s.pool_erase(n);
    c->size += n->size;
    c->next = n->next;
    if (c->next) c->next->prev = c;
    s.drop_chunk(n);
  }
  if (Chunk* p = c->prev; p && p->is_free()) {
    s.pool_erase(p);
    p->size += c->size;
    p->next = c->next;
    if (p->next) p->next->prev = p;
    s.drop_chunk(c);
    c = p;
  }
  return c;
}

// Chunk `c`, no longer in use, becomes free: merged into its pool, or without caching its segment
// is returned when nothing else is left in it.
void free_chunk(DeviceState& s, Chunk* c) {
  s.stats.active -= int64_t(c->size);
  c = merge(s, c);
  if (!s.stats.caching && !c->prev && !c->next)
    free_segment(s, c->segment);
  else
    s.pool_insert(c);
}

// Frees the chunks of deferred frees whose events have all completed; with `wait`, waits for every
// event first (empty_cache and the OOM retry, so those bytes can go back to the device).
void process_events(DeviceState& s, bool wait) {
  for (size_t i = 0; i < s.events.size();) {
    auto [event, c] = s.events[i];
    if (!cuda::event_done(event, wait)) {
      ++i;
      continue;
    }
    cuda::destroy_event(event);
    s.events[i] = s.events.back();
    s.events.pop_back();
    if (--c->pending == 0) free_chunk(s, c);
  }
}

size_t segment_size_for(const DeviceState& s, size_t size, bool small) {
  if (!s.stats.caching) return size;
  if (small) return memory::kSmallSegment;
  if (size < memory::kLargeSegmentMin) return memory::kLargeSegment;
  return (size + memory::kLargeRound - 1) / memory::kLargeRound * memory::kLargeRound;
}

// A new segment on `stream` for a request of `size`: the standard size, else (under the limit) one of
// just the request's size; when neither can be had, the cache is emptied once (after waiting for the
// events of deferred frees, so their blocks can go too) and both are tried again. Null, with
// `may_defer`, when that wait freed deferred blocks: the caller then looks in its pool again.
Segment* new_segment(DeviceState& s, const Block& b, bool small, const cuda::Stream& stream, bool may_defer,
                     bool may_fail) {
  const size_t size = b.size, preferred = segment_size_for(s, size, small);
  auto fits = [&](size_t n) { return s.stats.limit == 0 || s.stats.reserved + int64_t(n) <= s.stats.limit; };
  bool refused = false;
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool tried_preferred = false;  // when the standard size is the request's size, try it once
    for (size_t n : {preferred, size}) {
      if (!fits(n) || (n == size && size == preferred && tried_preferred)) continue;
      tried_preferred = true;
      void* p = source_alloc(s, n);
      if (!p) {
        refused = true;
        continue;
      }
      auto* seg = new Segment{p, reinterpret_cast<uintptr_t>(p), n, small, nullptr, stream, &s, s.next_serial++};
      seg->head = s.new_chunk(seg->base, n, seg);
      s.segments.emplace(seg->base, seg);
      s.stats.reserved += int64_t(n);
      s.stats.peak_reserved = std::max(s.stats.peak_reserved, s.stats.reserved);
      ++s.stats.num_segments;
      ++s.stats.num_segment_allocs;
      record(s, MemoryEventKind::SegmentAlloc, int64_t(n), seg->base, nullptr, Category::Other, {}, nullptr, seg);
      return seg;
    }
    if (attempt == 0) {
      const bool deferred = !s.events.empty();
      process_events(s, true);
      // A deferred block may now fit the request although its segment, still in use, cannot be
      // returned: the caller looks in the pool again before anything is emptied.
      if (deferred && may_defer) return nullptr;
      if (release_cached(s) == 0) break;
      ++s.stats.num_retries;
    }
  }
  if (may_fail && !refused) return nullptr;
  throw_oom(s, b, preferred, refused ? OomCause::DeviceRefused : OomCause::Limit);
}

// Keeps the first `size` bytes of free chunk `c` and returns the rest to the pool when worth keeping.
void split(DeviceState& s, Chunk* c, size_t size) {
  size_t rest = c->size - size;
  bool small = c->segment->small;
  if (small ? rest < kRoundBytes : rest <= kSmallRequest) return;
  Chunk* r = s.new_chunk(c->addr + size, rest, c->segment, c, c->next);
  if (c->next) c->next->prev = r;
  c->next = r;
  c->size = size;
  s.pool_insert(r);
}

// With `may_fail`, returns null where the limit alone refuses the request (a budget can then make room).
Chunk* take_chunk(DeviceState& s, const Block& b, const cuda::Stream& stream, bool may_fail) {
  process_events(s, false);  // blocks whose other streams have finished become reusable
  // Only matters when the limit was lowered below what is reserved: cached bytes past it are off limits too.
  if (s.stats.limit > 0 && s.stats.allocated + int64_t(b.size) > s.stats.limit) {
    if (may_fail) return nullptr;
    throw_oom(s, b, 0, OomCause::Limit);
  }
  bool small = b.size <= kSmallRequest;
  auto& pool = s.pool(small);
  for (bool first = true;; first = false) {
    if (s.stats.caching) {
      Segment probe_segment;
      probe_segment.stream = stream;
      Chunk probe{0, b.size, &probe_segment};
      auto it = pool.lower_bound(&probe);
      if (it != pool.end() && stream_key(*it) == stream_key(&probe)) {
        Chunk* c = *it;
        s.pool_erase(pool, it);
        ++s.stats.cache_hits;
        split(s, c, b.size);
        return c;
      }
    }
    if (Segment* seg = new_segment(s, b, small, stream, first, may_fail)) {
      Chunk* c = seg->head;
      split(s, c, b.size);
      return c;
    }
    if (may_fail && !first) return nullptr;
  }
}

int64_t parse_size(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (auto& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  for (auto [suffix, s] : {std::pair{'K', 1024.0}, {'M', 1024.0 * 1024}, {'G', 1024.0 * 1024 * 1024}})
    if (!unit.empty() && unit[0] == suffix && (unit.size() == 1 || unit.substr(1) == "B" || unit.substr(1) == "IB"))
      scale = s;
  MG_CHECK(used > 0 && scale > 0 && v >= 0 && v * scale < 0x1p63, ValueError,
           "MG_MEMORY_LIMIT: expected a byte count such as 1073741824, 512M or 8GiB (below 8 EiB), got \"", text, "\"");
  return int64_t(v * scale);
}

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

OwnerId intern_owner(const std::string& label) {
  auto& t = owner_table();
  std::lock_guard<std::mutex> g(t.mu);
  auto [it, added] = t.ids.emplace(label, OwnerId(t.labels.size()));
  if (added) t.labels.push_back(std::make_unique<const std::string>(label));
  return it->second;
}

const std::string& owner_label(OwnerId id) {
  auto& t = owner_table();
  std::lock_guard<std::mutex> g(t.mu);
  return *t.labels.at(id);
}

void fail_allocation_after(int64_t n) {
  MG_CHECK(n >= 0, ValueError, "fail_allocation_after: expected a count >= 0, got ", n);
  g_fail_countdown = n;
}
int64_t allocations_until_failure() { return g_fail_countdown.load(); }

int64_t limit_from_env(const std::string& spec, DeviceType type) {
  static const char* names[] = {"cpu", "cuda", "meta"};
  if (spec.find('=') == std::string::npos) return type == DeviceType::Meta ? 0 : parse_size(spec);
  int64_t limit = 0;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = std::min(spec.find(',', pos), spec.size());
    std::string item = spec.substr(pos, end - pos);
    size_t eq = item.find('=');
    MG_CHECK(eq != std::string::npos, ValueError, "MG_MEMORY_LIMIT: expected items such as cpu=1G,cuda=8G, got \"",
             item, "\" in \"", spec, "\"");
    std::string key = item.substr(0, eq);
    MG_CHECK(key == "cpu" || key == "cuda" || key == "meta", ValueError,
             "MG_MEMORY_LIMIT: expected a device type cpu, cuda or meta, got \"", key, "\"");
    int64_t v = parse_size(item.substr(eq + 1));
    if (key == names[size_t(type)]) limit = v;
    pos = end + 1;
  }
  return limit;
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
  if (nbytes > memory::kMaxRequest) throw_oom(s, *b, 0, OomCause::TooLarge);
  int64_t countdown = g_fail_countdown.load();
  while (countdown > 0 && !g_fail_countdown.compare_exchange_weak(countdown, countdown - 1)) {
  }
  if (countdown == 1) throw_oom(s, *b, 0, OomCause::Injected);
  // Under a memory budget (core/budget.h) a request past the limit first makes room: the runtime
  // evicts or offloads one storage at a time (outside this lock: it frees blocks) until it fits.
  const bool budgeted = budget::detail::any_active() && budget::detail::active(d);
  Chunk* c = take_chunk(s, *b, stream, budgeted);
  while (!c) {
    g.unlock();
    bool relieved = false;
    try {
      relieved = budget::detail::relieve(d, b->size);
    } catch (const MemoryBudgetError&) {
      std::lock_guard<std::mutex> again(s.mu);
      ++s.stats.num_ooms;
      record(s, MemoryEventKind::Oom, int64_t(b->size), 0, b);
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

void record_event(const Device& d, MemoryEventKind kind, int64_t bytes, uint64_t address, Category category,
                  const std::string& owner) {
  if (!g_recording.load(std::memory_order_relaxed)) return;
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  Block b;
  b.category = category;
  b.owner_id = intern_owner(owner);
  record(s, kind, bytes, address, &b);
}

void set_category(Block* b, Category c) {
  if (!b || b->category == c) return;
  DeviceState& s = state_of(b);
  std::lock_guard<std::mutex> g(s.mu);
  Category before = b->category;
  add_category(s, before, -int64_t(b->size));
  b->category = c;
  add_category(s, c, int64_t(b->size));
  record(s, MemoryEventKind::Relabel, int64_t(b->size), reinterpret_cast<uintptr_t>(b->ptr), b, before);
}

void set_owner(Block* b, const std::string& owner) {
  if (!b) return;
  const OwnerId id = intern_owner(owner);
  if (b->owner_id == id) return;
  DeviceState& s = state_of(b);
  std::lock_guard<std::mutex> g(s.mu);
  settle_peak(s);
  add_owner(s, b->owner_id, -int64_t(b->size));
  const OwnerId before = b->owner_id;
  b->owner_id = id;
  add_owner(s, id, int64_t(b->size));
  if (g_recording.load(std::memory_order_relaxed))  // the label is looked up only then
    record(s, MemoryEventKind::Relabel, int64_t(b->size), reinterpret_cast<uintptr_t>(b->ptr), b, b->category, {},
           &owner_label(before));
}

}  // namespace memory

IsolatedAllocator::IsolatedAllocator(const Device& d, int64_t limit) : device_(d) {
  MG_CHECK(limit >= 0, ValueError, "IsolatedAllocator: expected a non-negative limit, got ", limit);
  const size_t index = size_t(state_index(d));
  auto* s = new DeviceState;
  s->device = d;
  s->stats.limit = limit;
  previous_ = t_isolated[index];
  state_ = t_isolated[index] = s;
}

IsolatedAllocator::~IsolatedAllocator() {
  auto* s = static_cast<DeviceState*>(state_);
  t_isolated[size_t(state_index(device_))] = static_cast<DeviceState*>(previous_);
  bool empty = false;
  {
    std::lock_guard<std::mutex> g(s->mu);
    process_events(*s, true);
    release_cached(*s);
    empty = s->segments.empty();
    // Blocks still live (a tensor that outlived the guard) keep their allocator: it no longer caches,
    // so each segment goes back as its last block is freed. The state itself stays (a few bytes).
    s->detached = !empty;
    s->stats.caching = false;
  }
  if (empty) delete s;
}

MemoryStats memory_stats(const Device& d) {
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  MemoryStats r = s.stats;
  settle_peak(s);
  r.at_peak_by_owner = by_label(s.at_peak_by_owner);
  for (auto& pool : s.pools) {
    if (pool.empty()) continue;
    // The pools are grouped by stream: with one stream the last chunk is the largest, else look at all.
    if (stream_key(*pool.begin()) == stream_key(*pool.rbegin()))
      r.largest_free_block = std::max(r.largest_free_block, int64_t((*pool.rbegin())->size));
    else
      for (const Chunk* c : pool) r.largest_free_block = std::max(r.largest_free_block, int64_t(c->size));
  }
  return r;
}

void reset_peak(const Device& d) {
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  auto& st = s.stats;
  st.peak_allocated = st.allocated;
  st.peak_reserved = st.reserved;
  st.peak_active = st.active;
  st.peak_requested = st.requested;
  st.peak_by_category = st.by_category;
  st.at_peak_by_category = st.by_category;
  s.at_peak_by_owner = s.by_owner;
  s.peak_owners_pending = false;
}

void set_memory_limit(const Device& d, int64_t bytes) {
  MG_CHECK(bytes >= 0, ValueError, "set_memory_limit: expected a non-negative byte count, got ", bytes);
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  s.stats.limit = bytes;
}

std::map<std::string, int64_t> memory_by_owner(const Device& d) {
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  return by_label(s.by_owner);
}

void empty_cache(const Device& d) {
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  process_events(s, true);
  release_cached(s);
}

void set_caching(const Device& d, bool on) {
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  s.stats.caching = on;
  if (!on) {
    process_events(s, true);
    release_cached(s);
  }
}

void record_history(bool on, size_t max_entries) {
  auto& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  h.ring.clear();
  h.ring.shrink_to_fit();
  h.next = 0;
  h.capacity = on ? max_entries : 0;
  h.start = std::chrono::steady_clock::now();
  g_recording = on && max_entries > 0;
}

bool recording_history() { return g_recording.load(); }

std::vector<MemoryEvent> memory_history() {
  auto& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  if (h.ring.size() < h.capacity) return h.ring;
  std::vector<MemoryEvent> r(h.ring.begin() + std::ptrdiff_t(h.next), h.ring.end());
  r.insert(r.end(), h.ring.begin(), h.ring.begin() + std::ptrdiff_t(h.next));
  return r;
}

void annotate_memory(const std::string& note, const Device& d) {
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  record(s, MemoryEventKind::Annotation, 0, 0, nullptr, Category::Other, note);
}

std::vector<SegmentInfo> memory_segments(const Device& d) {
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  std::vector<SegmentInfo> r;
  for (auto& [base, seg] : s.segments) {
    SegmentInfo si{base, seg->serial, int64_t(seg->size), seg->small, {}};
    for (Chunk* c = seg->head; c; c = c->next) {
      BlockInfo bi;
      bi.address = c->addr;
      bi.size = int64_t(c->size);
      if (const Block* b = c->block) {
        bi.in_use = true;
        bi.allocated = int64_t(b->size);
        bi.requested = int64_t(b->requested);
        bi.category = b->category;
        bi.owner = b->owner();
        bi.op = b->op ? b->op : "";
      } else if (c->pending) {
        bi.in_use = true;  // released, but other streams' work may still use it: active, not allocated
        bi.owner = "(released; waiting for other streams)";
      }
      si.blocks.push_back(std::move(bi));
    }
    r.push_back(std::move(si));
  }
  return r;
}

std::vector<Device> devices_with_memory() {
  std::vector<Device> r;
  for (size_t i = 0; i < g_states.size(); ++i)  // this thread's IsolatedAllocator counts too
    if (DeviceState* s = t_isolated[i] ? t_isolated[i] : g_states[i].load()) r.push_back(s->device);
  return r;
}

}  // namespace mg
