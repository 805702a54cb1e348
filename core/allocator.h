// The one allocation path for tensor storage on every device: a caching allocator over a
// segment source (host: aligned malloc; CUDA: cudaMalloc; meta: addresses only, no bytes).
// A Block records what it is for (category, owner, op) so the ledger is exact bookkeeping.
//
// Layout, as in PyTorch's CUDA caching allocator: requests round up to 512 B; requests up to
// 1 MiB come from a small pool carved out of 2 MiB segments; larger ones from a large pool
// whose segments are 20 MiB for requests under 10 MiB and the request rounded up to 2 MiB
// above. A request takes the best-fitting cached free block of its pool, split when the rest
// is worth keeping (at least 512 B in the small pool, more than 1 MiB in the large one); a
// freed block merges with free neighbours. Under a memory limit, when a standard segment
// would not fit but one of just the request's size would, that smaller segment is used.
//
// With expandable segments (set_allocator_config, core/memory.h) memory comes instead from one
// segment per pool and stream that grows: a request no free block holds maps pages at the lowest
// address where free and unmapped space together hold it (normally the end, merging with a free
// tail), blocks split whenever 512 B or more are left, and a free block in front of unmapped space
// is taken only when no other free block holds the request, so that the segment grows least.
//
// Streams (cuda): a segment belongs to the stream that was current when it was made, and its
// blocks serve only requests on that stream (free pools are keyed by stream; merging stays within
// a segment), so a block freed after work on stream A is never handed to stream B while A's kernels
// may still use it. A block also used on other streams (record_stream) is, at release, followed by
// an event on each of them and stays out of the pools until all have completed; events are checked
// at the next allocation, and waited for before empty_cache and the out-of-memory retry. The ledger
// counts such a block as freed at release (allocated, its category and owner drop then, as in
// PyTorch); until its events complete its bytes stay in `active` and `reserved` but not in cached().
// On cpu and meta there is one stream (key 0) and none of this applies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <memgrad/core/device.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/op.h>

namespace mg {

namespace cuda {
class Stream;
}

namespace memory {
struct Chunk;  // the allocator's piece of a segment (private)

inline constexpr size_t kRoundBytes = 512;
inline constexpr size_t kSmallRequest = size_t(1) << 20;      // largest small-pool request
inline constexpr size_t kSmallSegment = size_t(2) << 20;      // small-pool segment size
inline constexpr size_t kLargeSegment = size_t(20) << 20;     // segment for 1-10 MiB requests
inline constexpr size_t kLargeSegmentMin = size_t(10) << 20;  // from here a segment per request
inline constexpr size_t kLargeRound = size_t(2) << 20;        // large segments round to this
inline constexpr size_t kExpandablePage = size_t(2) << 20;    // expandable segments map and unmap these
// Larger requests raise OutOfMemoryError without asking the device: no machine addresses more
// than 2^57 bytes (x86-64 with 5-level paging), and below it no size the ledger adds up overflows.
inline constexpr size_t kMaxRequest = size_t(1) << 57;
// The size a request of `nbytes` counts in the ledger (a multiple of 512, at least 512).
inline size_t round_size(size_t nbytes) {
  return nbytes == 0 ? kRoundBytes : (nbytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
}
}  // namespace memory

namespace memory {
// Owner labels are interned once, where they are named (a MemoryScope, set_owner, an op's first
// allocation): a block holds the label's id and the ledger counts bytes per id, so allocating and
// freeing never copy or look up a string. Ids live as long as the process; 0 is the empty label.
using OwnerId = uint32_t;
OwnerId intern_owner(const std::string& label);
const std::string& owner_label(OwnerId id);
}  // namespace memory

struct Block {
  void* ptr = nullptr;   // a fake, never dereferenced address on the meta device
  size_t size = 0;       // bytes counted in the ledger (rounded request)
  size_t requested = 0;  // bytes asked for
  Device device;
  Category category = Category::Other;
  memory::OwnerId owner_id = 0;
  const char* op = nullptr;  // the op that allocated it, if any
  memory::Chunk* chunk = nullptr;
  const std::string& owner() const { return memory::owner_label(owner_id); }
};

namespace memory {
// Allocates `nbytes` on `d`, under the current scope's category or `fallback`. Throws
// OutOfMemoryError past the device's limit (after emptying the cache and retrying).
Block* allocate(const Device& d, size_t nbytes, Category fallback);
void release(Block* b);
// Marks live block `b` as used on `stream` besides its own (see cuda::record_stream): at release,
// it waits for the work queued on `stream` by then before it can be reused.
void record_stream(const Block* b, const cuda::Stream& stream);
// Adds a budget event (Evict, Remat, Offload, Fetch) about the block at `address` (bytes of `category`
// and `owner`) to the history.
void record_event(const Device& d, MemoryEventKind kind, int64_t bytes, uint64_t address, Category category,
                  const std::string& owner);
// Moves a live block to another category (e.g. Temporary -> Activation when autograd saves it).
void set_category(Block* b, Category c);
// Moves a live block to another owner label (e.g. a gradient buffer becomes "<param>.grad").
void set_owner(Block* b, const std::string& owner);
// The op whose allocations follow (for owner labels of op outputs); Op::none outside every OpScope.
Op current_op();
// The allocator's one call out of itself, installed by the memory budget (core/budget/). When a
// request on a device the hook manages would pass the limit even after the cache was released, the
// allocator calls relieve(d, bytes), without its lock held, until the request fits: relieve moves or
// frees one storage's bytes and returns true, or returns false when `d` is no longer managed. It
// raises MemoryBudgetError when nothing can leave, which the allocator counts as an out-of-memory.
struct PressureHook {
  bool (*manages)(const Device& d) = nullptr;
  bool (*relieve)(const Device& d, size_t bytes) = nullptr;
};
void set_pressure_hook(const PressureHook& hook);
// Test hook for failure paths: the `n`-th allocation from now on (1: the next), on any device,
// throws OutOfMemoryError as a real one would (counted in num_ooms, recorded in the history);
// n = 0 disarms it. allocations_until_failure() is what is left of the countdown (0: disarmed or fired).
void fail_allocation_after(int64_t n);
int64_t allocations_until_failure();
// The limit for a device of `type` that an MG_MEMORY_LIMIT value `spec` asks for (0: none); see
// set_memory_limit. Throws ValueError for a malformed value.
int64_t limit_from_env(const std::string& spec, DeviceType type);
}  // namespace memory

// Marks allocations made inside an op with the op's name.
class OpScope {
 public:
  explicit OpScope(Op op);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  Op prev_;
};

}  // namespace mg
