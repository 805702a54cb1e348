// The history: a ring buffer of the allocator's events (allocations, frees, relabels, segments,
// out-of-memory, annotations and what a budget did), with the device's totals after each.
#include <algorithm>
#include <chrono>
#include <mutex>

#include <memgrad/core/memory/allocator_impl.h>

namespace mg {

namespace memory::impl {

namespace {
struct History {
  std::mutex mu;
  std::vector<MemoryEvent> ring;
  size_t capacity = 0, next = 0;
  std::chrono::steady_clock::time_point start;
};
History& history() {
  static History* h = new History;  // never destroyed: storages may be freed during static destruction
  return *h;
}
}  // namespace

std::atomic<bool> g_recording{false};

void add_event(DeviceState& s, MemoryEventKind kind, int64_t bytes, uint64_t address, const Block* b, Category previous,
               const std::string& note, const std::string* previous_owner, const Segment* seg,
               std::shared_ptr<const Fragmentation> forensics) {
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
    if (b->chunk && (kind == MemoryEventKind::Alloc || kind == MemoryEventKind::Free))
      e.carved = int64_t(b->chunk->size);
  }
  e.previous_category = previous;
  if (kind == MemoryEventKind::Relabel) e.previous_owner = previous_owner ? *previous_owner : e.owner;
  e.small_pool = seg && seg->small;
  e.expandable = seg && seg->expandable;
  e.fragmentation = std::move(forensics);
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

}  // namespace memory::impl

using namespace memory::impl;

const char* event_kind_name(MemoryEventKind k) {
  static const char* names[] = {"alloc", "free",        "relabel",      "segment_alloc", "segment_free",
                                "oom",   "annotation",  "evict",        "remat",         "offload",
                                "fetch", "segment_map", "segment_unmap"};
  return names[size_t(k)];
}

void memory::record_event(const Device& d, MemoryEventKind kind, int64_t bytes, uint64_t address, Category category,
                          const std::string& owner) {
  if (!g_recording.load(std::memory_order_relaxed)) return;
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  Block b;
  b.category = category;
  b.owner_id = intern_owner(owner);
  record(s, kind, bytes, address, &b);
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

}  // namespace mg
