// The ledger: allocated bytes per category and per owner, their peaks, and the breakdown at the
// moment of the global peak; memory_stats and the calls that reset or read it.
#include <algorithm>
#include <mutex>

#include <memgrad/core/memory/allocator_impl.h>

namespace mg {

namespace memory::impl {

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

void add_owner(DeviceState& s, OwnerId owner, int64_t n) {
  if (owner >= s.by_owner.size()) s.by_owner.resize(size_t(owner) + 1);
  s.by_owner[owner] += n;
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

}  // namespace memory::impl

using namespace memory::impl;
using memory::Chunk;

const char* category_name(Category c) {
  static const char* names[] = {"Parameter", "Gradient", "OptimizerState", "Activation",
                                "Temporary", "Input",    "Workspace",      "Other"};
  return names[size_t(c)];
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

std::map<std::string, int64_t> memory_by_owner(const Device& d) {
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  return by_label(s.by_owner);
}

void memory::set_category(Block* b, Category c) {
  if (!b || b->category == c) return;
  DeviceState& s = state_of(b);
  std::lock_guard<std::mutex> g(s.mu);
  Category before = b->category;
  add_category(s, before, -int64_t(b->size));
  b->category = c;
  add_category(s, c, int64_t(b->size));
  record(s, MemoryEventKind::Relabel, int64_t(b->size), reinterpret_cast<uintptr_t>(b->ptr), b, before);
}

void memory::set_owner(Block* b, const std::string& owner) {
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

}  // namespace mg
