// The caching allocator's private parts (core/allocator.h is its public face), shared by its files:
//   allocator.cpp  the front door: allocate, release, the thread's category/owner/op scopes
//   pools.cpp      segments carved into chunks: best fit, split, merge, deferred frees, the cache,
//                  expandable segments' growth
//   config.cpp     set_allocator_config and MG_ALLOC_CONF
//   forensics.cpp  fragmentation forensics: why the cache can or cannot serve a request
//   ledger.cpp     byte counts per category and owner, peaks, memory_stats
//   owners.cpp     owner labels interned to ids
//   limit.cpp      the memory limit and the out-of-memory report
//   history.cpp    the ring buffer of events
//   devices.cpp    each device's state (and an IsolatedAllocator's), and its segment source
// Every function below runs with the device state's mutex held, unless it says otherwise.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <memgrad/core/allocator.h>
#include <memgrad/core/cuda/stream.h>
#include <memgrad/core/error.h>

namespace mg {
struct AllocationTrace;  // core/memory/trace.h, which records through this state
}  // namespace mg

namespace mg::memory {

namespace impl {
struct DeviceState;
}

struct Segment;
// A piece of a segment: handed out (block set), waiting for other streams' events (block null,
// pending > 0), free (then in its pool's free set), or, in an expandable segment, pages not mapped
// (mapped false: in the segment's `unmapped` set, never in a pool).
struct Chunk {
  uintptr_t addr = 0;
  size_t size = 0;
  Segment* segment = nullptr;
  Chunk* prev = nullptr;
  Chunk* next = nullptr;
  Block* block = nullptr;
  std::vector<cuda::Stream> uses{};  // streams besides the segment's that used the live block
  int pending = 0;                   // events still outstanding since the block was released
  bool mapped = true;
  bool is_free() const { return !block && pending == 0 && mapped; }
};
struct ByAddress {
  bool operator()(const Chunk* a, const Chunk* b) const { return a->addr < b->addr; }
};
struct Segment {
  void* ptr = nullptr;
  uintptr_t base = 0;
  size_t size = 0;  // an expandable segment: the address range it reserved
  bool small = false;
  Chunk* head = nullptr;
  // The stream the segment was made for; its chunks serve only that stream. Holding the Stream keeps
  // a created stream alive while cached blocks are keyed by its handle (a new stream can't reuse it).
  cuda::Stream stream{};
  impl::DeviceState* state = nullptr;  // the allocator it belongs to (an IsolatedAllocator's or the device's)
  uint64_t serial = 0;                 // the order it was made in on its allocator
  // An expandable segment maps pages as it grows: `mapped` bytes of them, the rest of its range in
  // the `unmapped` chunks (page-aligned at both ends). A fixed segment is mapped whole.
  bool expandable = false;
  size_t mapped = 0;
  std::set<Chunk*, ByAddress> unmapped;
  size_t reserved() const { return expandable ? mapped : size; }  // its bytes in `reserved`
};

namespace impl {

inline uintptr_t stream_key(const Chunk* c) { return reinterpret_cast<uintptr_t>(c->segment->stream.handle()); }

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
  std::vector<FreeSet::node_type> spare_nodes;             // the free sets' tree nodes, extracted for reuse
  FreeSet pools[2];                                        // [0] small, [1] large
  std::map<uintptr_t, Segment*> segments;                  // by base address
  std::map<std::pair<uintptr_t, bool>, Segment*> growing;  // the expandable segment of each (stream, small pool)
  size_t refused_range = 0;  // the address range last refused to a new expandable segment (pools.cpp)
  std::vector<std::pair<void*, Chunk*>> events;  // recorded at release on other streams (cuda only)
  uintptr_t next_meta_address = uintptr_t(1) << 40;
  uint64_t next_serial = 0;
  bool detached = false;             // an IsolatedAllocator's state whose guard ended with blocks still live
  AllocationTrace* trace = nullptr;  // a TraceRecorder's: every allocation and release
  bool bare_oom = false;             // a TraceReplayer's: out of memory throws without the message and forensics
  std::unordered_map<const Block*, uint64_t> traced;  // the live blocks' numbers in it
  FreeSet& pool(bool small) { return pools[small ? 0 : 1]; }
  ~DeviceState() {
    for (Block* b : spare_blocks) delete b;
    for (Chunk* c : spare_chunks) delete c;
  }
  Chunk* new_chunk(uintptr_t addr, size_t size, Segment* seg, Chunk* prev = nullptr, Chunk* next = nullptr) {
    if (spare_chunks.empty()) return new Chunk{addr, size, seg, prev, next};
    Chunk* c = spare_chunks.back();
    spare_chunks.pop_back();
    c->addr = addr, c->size = size, c->segment = seg, c->prev = prev, c->next = next, c->mapped = true;
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

// ---- devices.cpp (no lock needed)

// The state allocations on `d` use on this thread: an IsolatedAllocator's, else the device's own.
DeviceState& state(const Device& d);
// The allocator a live block came from.
inline DeviceState& state_of(const Block* b) { return *b->chunk->segment->state; }
// The segment source: `n` bytes from the device (null when it refuses), and back.
void* source_alloc(DeviceState& s, size_t n);
void source_free(const Device& d, void* p);
// Expandable segments: an address range of `n` bytes aligned to kExpandablePage with nothing mapped
// (null when refused); pages mapped (false when the device refuses) and unmapped in it; the range
// given back (nothing mapped in it any more). Addresses and sizes are multiples of kExpandablePage.
size_t expandable_range(const DeviceState& s);  // the range a new expandable segment reserves
void* source_reserve(DeviceState& s, size_t n);
bool source_map(const Segment& seg, uintptr_t addr, size_t n);
void source_unmap(const Segment& seg, uintptr_t addr, size_t n);
void source_release(const Segment& seg);

// ---- owners.cpp (no lock needed)

// The label of an op's outputs outside every owner scope: the op's name, interned on first use.
OwnerId op_owner(Op op);
// Owner ids and their byte counts as labels, leaving out those at zero.
std::map<std::string, int64_t> by_label(const std::vector<int64_t>& bytes);

// ---- ledger.cpp

// Counts block `b` in (sign +1) or out (-1) of the ledger.
void account_alloc(DeviceState& s, const Block& b, int64_t sign);
void add_category(DeviceState& s, Category c, int64_t n);
void add_owner(DeviceState& s, OwnerId owner, int64_t n);
// Copies the owner breakdown at the peak when a new peak left it pending (before by_owner changes).
void settle_peak(DeviceState& s);

// ---- config.cpp (no lock needed)

// Whether new memory for `s` comes from expandable segments (the configuration, and caching on).
bool expandable(const DeviceState& s);

// ---- limit.cpp

// AddressSpace: the system refused the address range of a new expandable segment (segment_size).
enum class OomCause { Limit, DeviceRefused, AddressSpace, TooLarge, Injected };
// Counts and records the refusal of `b` and raises OutOfMemoryError with the ledger's breakdown
// and the fragmentation forensics.
[[noreturn]] void throw_oom(DeviceState& s, const Block& b, const cuda::Stream& stream, size_t segment_size,
                            OomCause cause);

// ---- forensics.cpp

// The forensics of `s` for request `b` (null: none) on `stream`, for an error of `cause`.
Fragmentation analyze(DeviceState& s, const Block* b, const cuda::Stream& stream, OomCause cause);

// ---- history.cpp

extern std::atomic<bool> g_recording;
void add_event(DeviceState& s, MemoryEventKind kind, int64_t bytes, uint64_t address, const Block* b, Category previous,
               const std::string& note, const std::string* previous_owner, const Segment* seg,
               std::shared_ptr<const Fragmentation> forensics);
// Adds an event to the history when it is recording (a relaxed load otherwise). `previous_owner`: a
// Relabel's owner before (default: unchanged); `seg`: a segment or map event's segment; `forensics`:
// an Oom's.
inline void record(DeviceState& s, MemoryEventKind kind, int64_t bytes, uint64_t address, const Block* b,
                   Category previous = Category::Other, const std::string& note = {},
                   const std::string* previous_owner = nullptr, const Segment* seg = nullptr,
                   std::shared_ptr<const Fragmentation> forensics = nullptr) {
  if (g_recording.load(std::memory_order_relaxed))
    add_event(s, kind, bytes, address, b, previous, note, previous_owner, seg, std::move(forensics));
}

// ---- pools.cpp

// A free chunk of at least b.size bytes on `stream`, from the cache or a new segment. With `may_fail`,
// returns null where the limit alone refuses the request (a budget can then make room).
Chunk* take_chunk(DeviceState& s, const Block& b, const cuda::Stream& stream, bool may_fail);
// Chunk `c`, no longer in use, becomes free: merged into its pool, or without caching its segment
// is returned when nothing else is left in it.
void free_chunk(DeviceState& s, Chunk* c);
// Frees the chunks of deferred frees whose events have all completed; with `wait`, waits for every
// event first (empty_cache and the OOM retry, so those bytes can go back to the device).
void process_events(DeviceState& s, bool wait);
// Returns every segment that is one free chunk, and unmaps the whole free pages of expandable
// segments; gives the bytes released.
int64_t release_cached(DeviceState& s);
// The size a new (fixed) segment for a request of `size` bytes gets.
size_t segment_size_for(const DeviceState& s, size_t size, bool small);
// Whether free chunk `c` lies just before unmapped pages of its expandable segment: it can grow.
inline bool grows(const Chunk* c) { return c->next && !c->next->mapped; }

}  // namespace impl
}  // namespace mg::memory
