// The pools: segments from the device's source carved into chunks. A request takes the best-fitting
// free chunk of its pool (small or large, on its stream), split when the rest is worth keeping; a
// freed chunk merges with free neighbours; a chunk used on other streams waits for their events.
#include <algorithm>
#include <mutex>

#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/memory/allocator_impl.h>

namespace mg {

namespace memory::impl {

namespace {
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

}  // namespace

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

namespace {
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

}  // namespace

void free_chunk(DeviceState& s, Chunk* c) {
  s.stats.active -= int64_t(c->size);
  c = merge(s, c);
  if (!s.stats.caching && !c->prev && !c->next)
    free_segment(s, c->segment);
  else
    s.pool_insert(c);
}

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

namespace {
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

}  // namespace

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

}  // namespace memory::impl

using namespace memory::impl;
using memory::Chunk;

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

}  // namespace mg
