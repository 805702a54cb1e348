// The memory ledger's public face: every allocation carries a category and an owner label
// from the moment it is made, and the categories always sum to the allocated bytes.
//
// Who sets which category:
//   nn parameters      MemoryScope(Category::Parameter, "fc1.weight") around their creation
//   .grad buffers      autograd (AccumulateGrad) relabels them Gradient
//   optimizer state    allocate it inside MemoryScope(Category::OptimizerState, param_name); the
//                      owner label then tells which parameter each moment/master copy belongs to
//   saved for backward a Temporary tensor saved by autograd counts as Activation while saved
//   user tensors       factories fall back to Input; op outputs to Temporary; kernel scratch to Workspace
//
// Byte counts: `allocated` and every per-category and per-owner figure are the request sizes
// rounded up to 512 B (a tensor of 100 floats counts 512 B); `requested` is the exact sum of the
// bytes asked for; `active` is the size of the blocks carved out of segments (at least the
// rounded size: a tail too small to split stays with its block); `reserved` is the segments
// held from the device. The rounded `allocated` is the same on every device and with caching on
// or off, so a run on the meta device predicts it to the byte.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <memgrad/core/device.h>

namespace mg {

enum class Category : uint8_t {
  Parameter,       // nn parameters
  Gradient,        // .grad buffers
  OptimizerState,  // momentum, Adam moments, master weights
  Activation,      // tensors saved by autograd for backward, while saved
  Temporary,       // op outputs nobody saved
  Input,           // tensors the user creates
  Workspace,       // GEMM/conv scratch
  Other,
};
inline constexpr int kNumCategories = 8;
const char* category_name(Category c);

// Sets the category for allocations made in this scope (optional) and pushes an owner label;
// nested labels join with '.' ("blocks.3" inside "model" gives "model.blocks.3").
class MemoryScope {
 public:
  explicit MemoryScope(Category c);
  explicit MemoryScope(const std::string& owner);
  MemoryScope(Category c, const std::string& owner);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  std::optional<Category> prev_category_;
  size_t prev_owner_len_;
  uint32_t prev_owner_id_;  // the interned label (memory::OwnerId) of the enclosing scope
};
// The category of the innermost scope that set one, else `fallback`.
Category current_category(Category fallback);
const std::string& current_owner();

using CategoryBytes = std::array<int64_t, kNumCategories>;

// Counters for one device (see the top of this file for what each kind of byte count means).
struct MemoryStats {
  int64_t allocated = 0, peak_allocated = 0;
  int64_t reserved = 0, peak_reserved = 0;
  int64_t active = 0, peak_active = 0;
  int64_t requested = 0, peak_requested = 0;
  CategoryBytes by_category{}, peak_by_category{};
  // Category and owner breakdown at the moment of the global peak of `allocated`.
  CategoryBytes at_peak_by_category{};
  std::map<std::string, int64_t> at_peak_by_owner;
  int64_t total_allocated = 0, total_freed = 0;  // cumulative rounded bytes
  int64_t num_allocs = 0, num_frees = 0;
  int64_t num_segments = 0;                               // segments held now
  int64_t num_segment_allocs = 0, num_segment_frees = 0;  // cumulative
  int64_t num_maps = 0, num_unmaps = 0;                   // expandable segments' page mappings, cumulative
  int64_t cache_hits = 0;                                 // allocations served from a cached free block
  int64_t num_ooms = 0;                                   // OutOfMemoryError thrown
  int64_t num_retries = 0;                                // times the cache was emptied to satisfy a request
  int64_t largest_free_block = 0;                         // largest cached block that could serve a request now
  int64_t limit = 0;                                      // 0: none
  bool caching = true;

  int64_t category(Category c) const { return by_category[size_t(c)]; }
  int64_t peak(Category c) const { return peak_by_category[size_t(c)]; }
  int64_t at_peak(Category c) const { return at_peak_by_category[size_t(c)]; }
  int64_t cached() const { return reserved - active; }            // free bytes inside segments
  int64_t fragmentation() const { return reserved - allocated; }  // held but not handed out
};

MemoryStats memory_stats(const Device& d = kCPU);
// Starts the peaks (and the breakdown at the peak) again from the current values.
void reset_peak(const Device& d = kCPU);
// Caps the bytes reserved on `d` (0 removes the cap). Past it the allocator frees its cached
// segments, retries, then throws OutOfMemoryError; on CPU this behaves like a GPU of that size.
// A request that would take `allocated` past the cap is refused even from the cache (this only
// matters when the cap is set below what is already reserved).
// Without a call, the environment variable MG_MEMORY_LIMIT sets it when `d` first allocates:
// "512M" (cpu and cuda devices) or per device type "cpu=1G,cuda=8G,meta=40G"; suffixes K, M, G
// (powers of 1024), optionally followed by "B" or "iB".
void set_memory_limit(const Device& d, int64_t bytes);
// Gives this thread a fresh allocator for device `d` until the guard ends, as a new process would
// start with: no segments, every count and peak zero, `limit` as its memory limit (0: none). On this
// thread, allocations on `d` and memory_stats, reset_peak, set_memory_limit, empty_cache, ... for `d`
// use it; blocks it handed out go back to it whichever thread frees them. The planner runs each plan
// in one, so that what the process allocated before cannot change a plan's reserved bytes; tests
// measure real steps in one to compare with the plan. Guards nest. Blocks still live when the guard
// ends keep their allocator (caching off: each segment is returned as its last block goes).
class IsolatedAllocator {
 public:
  explicit IsolatedAllocator(const Device& d, int64_t limit = 0);
  ~IsolatedAllocator();
  IsolatedAllocator(const IsolatedAllocator&) = delete;
  IsolatedAllocator& operator=(const IsolatedAllocator&) = delete;

 private:
  Device device_;
  void* state_;
  void* previous_;
};

// Live bytes per owner label on `d`.
std::map<std::string, int64_t> memory_by_owner(const Device& d = kCPU);

// Returns the cached segments of `d` that hold no live block to the device.
void empty_cache(const Device& d = kCPU);
// Turns the cache of `d` on or off. Off: each allocation gets its own segment, returned when
// freed (for comparison with the caching allocator; expandable segments do not apply then); turning
// it off empties the cache.
void set_caching(const Device& d, bool on);

// ---- the allocator's configuration

// How every device's allocator gets memory, in the spelling of PyTorch's PYTORCH_CUDA_ALLOC_CONF:
// comma-separated key:value pairs. The environment variable MG_ALLOC_CONF sets it when the first
// allocator starts; set_allocator_config changes it for the memory allocators get from then on
// (segments that exist stay as they are).
struct AllocatorConfig {
  // "expandable_segments:True": instead of a new segment for each shortage (2 MiB, 20 MiB or the
  // request rounded up to 2 MiB), one segment per pool and stream reserves a large address range
  // and maps memory into it, in pages of memory::kExpandablePage, as it grows; the free pages are
  // unmapped again by empty_cache() and before an out-of-memory error, and mapped where the next
  // request needs them. Requests then tile one contiguous range, so that a freed tail is never a
  // sliver stranded at the end of a segment (pytorch/pytorch#1529). `reserved` counts the mapped
  // bytes, and a memory limit caps them. cpu: mmap(PROT_NONE) + mprotect / madvise(MADV_DONTNEED);
  // cuda: cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess; meta models the same pages.
  bool expandable_segments = false;
};
// Throws ValueError naming the accepted keys for an unknown key or value ("expandable_segments:maybe").
void set_allocator_config(const std::string& config);
AllocatorConfig allocator_config();

// ---- fragmentation forensics: why cached bytes can or cannot serve a request

// Free blocks ("holes") of one pool whose sizes lie in [from, to), a power of two and its double.
struct HoleSizeBin {
  int64_t from = 0, to = 0;
  int64_t holes = 0, bytes = 0;
  std::string range() const;  // "512 KiB-1 MiB"
};
struct PoolFragmentation {
  bool small_pool = false;  // requests up to 1 MiB; the large pool serves the others
  int64_t segments = 0;
  int64_t reserved = 0;      // the pool's segments' bytes (an expandable segment's mapped bytes)
  int64_t free_bytes = 0;    // cached in free blocks
  int64_t largest_free = 0;  // the largest free block
  // What empty_cache() gives back now: segments with no live block, and the whole free pages of
  // expandable segments.
  int64_t releasable = 0;
  std::vector<HoleSizeBin> by_hole_size;  // free_bytes by the size of their hole, smallest first (bins that hold any)
};
// A live block, as the forensics name it.
struct BlockRef {
  uint64_t address = 0;
  int64_t size = 0;  // its size in the segment
  Category category = Category::Other;
  std::string owner, op;  // owner "(released; waiting for other streams)" for a block other streams still use
};
// Consecutive blocks of one segment whose free bytes would hold the request if the live blocks
// among them were freed: the live blocks that split that room into holes too small for it. Where no
// segment has that much room, a segment's blocks from its first hole to its last (free_bytes below
// the request): the live blocks that split the most room there is.
struct SplitHole {
  uint64_t segment = 0, address = 0;
  int64_t size = 0;               // the span, from the first hole's start to the last one's end
  int64_t free_bytes = 0;         // in its holes
  int64_t largest_hole = 0;       // the largest of them
  std::vector<BlockRef> pinning;  // in address order
};
// The allocator's cache seen from one request (or from none: the state alone).
struct Fragmentation {
  Device device;
  int64_t request = 0;  // the request's rounded bytes (0: none)
  bool small_request = false;
  int64_t limit = 0, allocated = 0, reserved = 0, cached = 0;  // as in MemoryStats (cached: reserved - active)
  bool caching = true, expandable = false;                     // the allocator's mode
  PoolFragmentation pools[2];                                  // [0] small, [1] large
  int64_t other_streams = 0;   // cached bytes of the request's pool in segments of other streams (cuda)
  bool fits_in_cache = false;  // a free block of the request's pool (on its stream) holds it
  // Bytes the request would add to `reserved` past the cache: a segment of its own size, or the
  // pages an expandable segment would map.
  int64_t new_memory = 0;
  // When no free block holds the request: where freeing live blocks would make room, fewest
  // pinned bytes first; or, where nowhere would, the spans with the most free bytes first (at most 3).
  std::vector<SplitHole> split_holes;
  // Would it fit under the limit (no limit: the device's answer is unknown, so yes)...
  bool fits_after_empty_cache = false;  // ... once empty_cache() gave back what it can?
  bool fits_with_other_pool = false;    // ... if the other pool's cached bytes went back to the device too?
  // ... with expandable segments, where each whole free page (of 2 MiB) can be unmapped and mapped
  // again at the end of the request's segment?
  bool fits_expandable = false;
  // In plain words: "13.26 MiB is cached, but in the large pool, which small requests do not use".
  std::string reason;
  // The lines an OutOfMemoryError adds to its message: the reason, each pool's holes by size, the
  // pinning blocks, and what would make the request fit.
  std::string str() const;
};
// The forensics of `d` now, for a request of `request` bytes on the current stream (0: no request).
Fragmentation fragmentation(const Device& d = kCPU, int64_t request = 0);

// "1.50 MiB": bytes in binary units (B to EiB), for reports.
std::string format_bytes(int64_t bytes);
// The same for a byte count beyond int64 (a request of 8 EiB or more).
std::string format_byte_count(uint64_t bytes);

// A readable table of the stats of `d` (like PyTorch's memory_summary) with the breakdown by
// category and the top owners at the peak.
std::string memory_summary(const Device& d = kCPU);

// ---- history

// Evict, Remat, Offload and Fetch mark what a memory budget (core/budget/budget.h) did to a block of
// `bytes`: they come with the Free or Alloc event that changes the ledger.
enum class MemoryEventKind : uint8_t {
  Alloc,
  Free,
  Relabel,
  SegmentAlloc,
  SegmentFree,
  Oom,
  Annotation,
  Evict,
  Remat,
  Offload,
  Fetch,
  SegmentMap,   // an expandable segment mapped pages (`bytes` of them, from `address`)
  SegmentUnmap  // and unmapped them
};
const char* event_kind_name(MemoryEventKind k);

// One entry of the history. `bytes` is the rounded block size (segment size for segment
// events, the failed request for Oom); the totals are the device's state after the event.
// A Relabel moves a live block to another category or owner (or both); `address` is the block's
// (the segment's for segment events, the first mapped byte's for map events, the block's for
// budget events, 0 for Oom and Annotation). An expandable segment's SegmentAlloc and SegmentFree
// reserve and release its address range (`bytes` of it, none of them in `reserved`); SegmentMap and
// SegmentUnmap change `reserved`.
struct MemoryEvent {
  MemoryEventKind kind = MemoryEventKind::Alloc;
  Device device;
  int64_t time_ns = 0;  // since the history was switched on
  int64_t bytes = 0, requested = 0;
  uint64_t address = 0;
  Category category = Category::Other;
  Category previous_category = Category::Other;        // Relabel: the category before
  std::string owner, op, note;                         // note: the text of an Annotation
  std::string previous_owner;                          // Relabel: the owner before
  bool small_pool = false;                             // segment and map events: a small-pool segment
  bool expandable = false;                             // segment and map events: an expandable segment
  int64_t carved = 0;                                  // Alloc, Free: the block's size in its segment (>= bytes)
  std::shared_ptr<const Fragmentation> fragmentation;  // Oom: why the cache could not serve the request
  int64_t allocated = 0, reserved = 0;
  CategoryBytes by_category{};
};

// Records events of every device into a ring buffer that keeps the last `max_entries`.
// Switching it on clears what was recorded.
void record_history(bool on, size_t max_entries = 100000);
bool recording_history();
std::vector<MemoryEvent> memory_history();  // oldest first
// Adds an annotation to the history of `d`. The timeline page marks "step N" as the boundary of
// step N and "forward", "backward", "optimizer" as the start of that phase (train::train_step and
// `memgrad train` write them); any other note is drawn as a labelled line.
void annotate_memory(const std::string& note, const Device& d = kCPU);

// Writes JSON (format "memgrad-memory-snapshot", version kSnapshotVersion; docs/memory.md lists
// its fields) with the stats, segments and blocks of every device that allocated, and the history.
// A snapshot taken while the history records is what `memgrad view` draws.
inline constexpr int kSnapshotVersion = 3;
void dump_snapshot(const std::string& path, const std::string& title = "");

// The page that draws a recorded history or snapshots: report/timeline.h (memory::write_timeline).

// ---- the allocator's layout, for snapshots and tests

struct BlockInfo {
  uint64_t address = 0;
  int64_t size = 0;       // carved size
  int64_t allocated = 0;  // rounded request (0 when free)
  int64_t requested = 0;
  bool in_use = false;
  bool mapped = true;  // false: pages of an expandable segment unmapped again (not in use, not reserved)
  Category category = Category::Other;
  std::string owner, op;
};
struct SegmentInfo {
  uint64_t address = 0;
  uint64_t serial = 0;  // the order it was made in on its allocator (address order is the device's choice)
  int64_t size = 0;     // bytes it holds from the device (counted in reserved): an expandable one's mapped pages
  bool small_pool = false;
  bool expandable = false;
  int64_t extent = 0;             // the bytes its blocks tile: size, or up to an expandable one's last mapped page
  int64_t virtual_size = 0;       // the address range it reserved (size for a fixed segment)
  std::vector<BlockInfo> blocks;  // in address order, tiling [address, address + extent)
};
std::vector<SegmentInfo> memory_segments(const Device& d = kCPU);
// Devices that have allocated at least once (on this thread: an IsolatedAllocator's device too).
std::vector<Device> devices_with_memory();

}  // namespace mg
