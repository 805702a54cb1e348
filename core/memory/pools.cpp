// The pools: segments from the device's source carved into chunks. A request takes the best-fitting
// free chunk of its pool (small or large, on its stream), split when the rest is worth keeping; a
// freed chunk merges with free neighbours; a chunk used on other streams waits for their events.
#include <algorithm>
#include <mutex>
#include <utility>

#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/memory/allocator_impl.h>

namespace mg {

namespace memory::impl {

namespace {

constexpr size_t kPage = kExpandablePage;
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void free_segment(DeviceState& s, Segment* seg) {
  s.segments.erase(seg->base);
  if (seg->expandable) {
    auto it = s.growing.find({reinterpret_cast<uintptr_t>(seg->stream.handle()), seg->small});
    if (it != s.growing.end() && it->second == seg) s.growing.erase(it);
  }
  s.stats.reserved -= int64_t(seg->reserved());
  --s.stats.num_segments;
  ++s.stats.num_segment_frees;
  record(s, MemoryEventKind::SegmentFree, int64_t(seg->size), seg->base, nullptr, Category::Other, {}, nullptr, seg);
  if (seg->expandable)
    source_release(*seg);
  else
    source_free(s.device, seg->ptr);
  s.drop_chunk(seg->head);
  delete seg;
}

// Chunk `a` takes in chunk `b`, the one after it.
void absorb(DeviceState& s, Chunk* a, Chunk* b) {
  a->size += b->size;
  a->next = b->next;
  if (a->next) a->next->prev = a;
  s.drop_chunk(b);
}

// Merges free chunk `c` with its free neighbours (taking them out of the pool); returns the result.
Chunk* merge(DeviceState& s, Chunk* c) {
  if (Chunk* n = c->next; n && n->is_free()) {
    s.pool_erase(n);
    absorb(s, c, n);
  }
  if (Chunk* p = c->prev; p && p->is_free()) {
    s.pool_erase(p);
    absorb(s, p, c);
    c = p;
  }
  return c;
}

// Cuts chunk `c` at `offset` bytes: `c` keeps the front; returns the rest, a new chunk with the same
// mapping (in no pool or set yet).
Chunk* cut(DeviceState& s, Chunk* c, size_t offset) {
  Chunk* r = s.new_chunk(c->addr + offset, c->size - offset, c->segment, c, c->next);
  r->mapped = c->mapped;
  if (c->next) c->next->prev = r;
  c->next = r;
  c->size = offset;
  return r;
}

// Maps the first `n` bytes (whole pages) of unmapped chunk `u`; returns them as a free chunk merged
// with its free neighbours (out of the pool), or null when the device refuses.
Chunk* map_front(DeviceState& s, Chunk* u, size_t n) {
  Segment* seg = u->segment;
  if (!source_map(*seg, u->addr, n)) return nullptr;
  seg->unmapped.erase(u);
  if (n < u->size) seg->unmapped.insert(cut(s, u, n));
  u->mapped = true;
  seg->mapped += n;
  s.stats.reserved += int64_t(n);
  s.stats.peak_reserved = std::max(s.stats.peak_reserved, s.stats.reserved);
  ++s.stats.num_maps;
  record(s, MemoryEventKind::SegmentMap, int64_t(n), u->addr, nullptr, Category::Other, {}, nullptr, seg);
  return merge(s, u);
}

// Unmaps the whole pages inside free chunk `c` of an expandable segment (out of the pool); what is
// left of it on either side goes back to the pool. Gives the bytes unmapped.
size_t unmap_pages(DeviceState& s, Chunk* c) {
  Segment* seg = c->segment;
  const uintptr_t lo = seg->base + round_up(c->addr - seg->base, kPage),
                  hi = seg->base + (c->addr + c->size - seg->base) / kPage * kPage;
  if (hi <= lo) {
    s.pool_insert(c);
    return 0;
  }
  if (lo > c->addr) {
    Chunk* front = c;
    c = cut(s, c, lo - c->addr);
    s.pool_insert(front);
  }
  if (hi < c->addr + c->size) s.pool_insert(cut(s, c, hi - c->addr));
  const size_t n = hi - lo;
  source_unmap(*seg, lo, n);
  c->mapped = false;
  seg->mapped -= n;
  s.stats.reserved -= int64_t(n);
  ++s.stats.num_unmaps;
  record(s, MemoryEventKind::SegmentUnmap, int64_t(n), lo, nullptr, Category::Other, {}, nullptr, seg);
  if (Chunk* next = c->next; next && !next->mapped) {  // one unmapped chunk with its unmapped neighbours
    seg->unmapped.erase(next);
    absorb(s, c, next);
  }
  if (Chunk* prev = c->prev; prev && !prev->mapped) {
    seg->unmapped.erase(prev);
    absorb(s, prev, c);
    c = prev;
  }
  seg->unmapped.insert(c);
  return n;
}

// Unmaps the whole free pages of expandable segment `seg`, and returns it when nothing is mapped
// any more. Gives the bytes unmapped.
int64_t release_pages(DeviceState& s, Segment* seg) {
  std::vector<Chunk*> free_chunks;  // never adjacent to each other: unmapping one leaves the others as they are
  for (Chunk* c = seg->head; c; c = c->next)
    if (c->is_free()) free_chunks.push_back(c);
  int64_t unmapped = 0;
  for (Chunk* c : free_chunks) {
    s.pool_erase(c);
    unmapped += int64_t(unmap_pages(s, c));
  }
  if (seg->mapped == 0) free_segment(s, seg);
  return unmapped;
}

}  // namespace

int64_t release_cached(DeviceState& s) {
  int64_t freed = 0;
  for (auto it = s.segments.begin(); it != s.segments.end();) {
    Segment* seg = (it++)->second;
    if (seg->expandable) {
      freed += release_pages(s, seg);
      continue;
    }
    Chunk* c = seg->head;
    if (!c->is_free() || c->next) continue;
    s.pool_erase(c);
    freed += int64_t(seg->size);
    free_segment(s, seg);
  }
  return freed;
}

void free_chunk(DeviceState& s, Chunk* c) {
  s.stats.active -= int64_t(c->size);
  c = merge(s, c);
  if (s.stats.caching) return s.pool_insert(c);
  if (!c->segment->expandable) {
    if (!c->prev && !c->next) return free_segment(s, c->segment);
    return s.pool_insert(c);
  }
  Segment* seg = c->segment;  // caching turned off after it grew: its free pages go at once
  unmap_pages(s, c);
  if (seg->mapped == 0) free_segment(s, seg);
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

size_t segment_size_for(const DeviceState& s, size_t size, bool small) {
  if (!s.stats.caching) return size;
  if (small) return memory::kSmallSegment;
  if (size < memory::kLargeSegmentMin) return memory::kLargeSegment;
  return (size + memory::kLargeRound - 1) / memory::kLargeRound * memory::kLargeRound;
}

namespace {

// A segment of `n` bytes at `p`, one chunk, in `s`'s list (not yet counted in the stats).
Segment* add_segment(DeviceState& s, void* p, size_t n, bool small, const cuda::Stream& stream) {
  auto* seg = new Segment;
  seg->ptr = p, seg->base = reinterpret_cast<uintptr_t>(p), seg->size = n, seg->small = small;
  seg->stream = stream, seg->state = &s, seg->serial = s.next_serial++;
  seg->head = s.new_chunk(seg->base, n, seg);
  s.segments.emplace(seg->base, seg);
  return seg;
}

bool under_limit(const DeviceState& s, size_t n) {
  return s.stats.limit == 0 || s.stats.reserved + int64_t(n) <= s.stats.limit;
}

// A new fixed segment for a request of `size`: the standard size, else (under the limit) one of just
// the request's size; its one free chunk, or null (`refused`: the device refused).
Chunk* fixed_segment(DeviceState& s, size_t size, bool small, const cuda::Stream& stream, bool& refused) {
  const size_t preferred = segment_size_for(s, size, small);
  bool tried_preferred = false;  // when the standard size is the request's size, try it once
  for (size_t n : {preferred, size}) {
    if (!under_limit(s, n) || (n == size && size == preferred && tried_preferred)) continue;
    tried_preferred = true;
    void* p = source_alloc(s, n);
    if (!p) {
      refused = true;
      continue;
    }
    Segment* seg = add_segment(s, p, n, small, stream);
    s.stats.reserved += int64_t(n);
    s.stats.peak_reserved = std::max(s.stats.peak_reserved, s.stats.reserved);
    ++s.stats.num_segments;
    ++s.stats.num_segment_allocs;
    record(s, MemoryEventKind::SegmentAlloc, int64_t(n), seg->base, nullptr, Category::Other, {}, nullptr, seg);
    return seg->head;
  }
  return nullptr;
}

// A new expandable segment for (stream, pool) with room for `size` bytes, nothing mapped yet.
// Where the system refuses the range (an address-space limit: ulimit -v), half of it is tried, and so
// on down to the request's pages; refused even then, `s.refused_range` says how much address space
// was asked for (the error names it for what it is).
Segment* new_expandable(DeviceState& s, size_t size, bool small, const cuda::Stream& stream, bool& refused) {
  const size_t least = round_up(size, kPage);
  size_t range = std::max(expandable_range(s), least);
  void* p = nullptr;
  while (!(p = source_reserve(s, range)) && range > least) range = std::max(least, range / 2 / kPage * kPage);
  if (!p) {
    refused = true;
    s.refused_range = range;
    return nullptr;
  }
  Segment* seg = add_segment(s, p, range, small, stream);
  seg->expandable = true;
  seg->head->mapped = false;
  seg->unmapped.insert(seg->head);
  s.growing[{reinterpret_cast<uintptr_t>(stream.handle()), small}] = seg;
  ++s.stats.num_segments;
  ++s.stats.num_segment_allocs;
  record(s, MemoryEventKind::SegmentAlloc, int64_t(range), seg->base, nullptr, Category::Other, {}, nullptr, seg);
  return seg;
}

// The free chunk (out of the pool) of the expandable segment of (stream, pool) that holds `size`
// bytes once pages are mapped for it, or null when the limit (or the device: `refused`) leaves too
// little. Of the runs of free and unmapped chunks that can hold it, the one that maps the fewest
// pages, and among those the lowest: normally the free tail and the pages after it.
Chunk* grow(DeviceState& s, size_t size, bool small, const cuda::Stream& stream, bool& refused) {
  auto it = s.growing.find({reinterpret_cast<uintptr_t>(stream.handle()), small});
  Segment* seg = it == s.growing.end() ? nullptr : it->second;
  Chunk* best = nullptr;
  size_t best_map = 0;
  static const std::set<Chunk*, ByAddress> none;
  for (Chunk* u : seg ? std::as_const(seg->unmapped) : none) {
    Chunk* start = u->prev && u->prev->is_free() ? u->prev : u;
    size_t have = 0, to_map = 0;
    for (Chunk* c = start; c && have < size && (c->is_free() || !c->mapped); c = c->next) {
      const size_t n = c->mapped ? c->size : std::min(c->size, round_up(size - have, kPage));
      have += n;
      to_map += c->mapped ? 0 : n;
    }
    if (have >= size && (!best || to_map < best_map)) best = start, best_map = to_map;
  }
  if (!best) {  // no segment yet, or its range is full
    if (!under_limit(s, round_up(size, kPage))) return nullptr;
    if (!(seg = new_expandable(s, size, small, stream, refused))) return nullptr;
    best = seg->head, best_map = round_up(size, kPage);
  }
  if (!under_limit(s, best_map)) return nullptr;
  Chunk* c = best;
  if (c->mapped) {
    s.pool_erase(c);
  } else if (!(c = map_front(s, c, std::min(c->size, round_up(size, kPage))))) {
    refused = true;
    return nullptr;
  }
  while (c->size < size) {  // c ends where unmapped pages begin
    Chunk* m = map_front(s, c->next, std::min(c->next->size, round_up(size - c->size, kPage)));
    if (!m) {
      s.pool_insert(c);
      refused = true;
      return nullptr;
    }
    c = m;
  }
  return c;
}

// Memory for a request no cached block holds: a new segment, or pages mapped into an expandable one.
// When neither can be had, the cache is emptied once (after waiting for the events of deferred frees,
// so their blocks can go too) and it is tried again. Null, with `may_defer`, when that wait freed
// deferred blocks: the caller then looks in its pool again; null, with `may_fail`, where the limit
// alone refuses (a budget can then make room).
Chunk* new_memory(DeviceState& s, const Block& b, bool small, const cuda::Stream& stream, bool may_defer,
                  bool may_fail) {
  bool refused = false;
  s.refused_range = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (Chunk* c =
            expandable(s) ? grow(s, b.size, small, stream, refused) : fixed_segment(s, b.size, small, stream, refused))
      return c;
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
  if (refused && s.refused_range) throw_oom(s, b, stream, s.refused_range, OomCause::AddressSpace);
  throw_oom(s, b, stream, expandable(s) ? round_up(b.size, kPage) : segment_size_for(s, b.size, small),
            refused ? OomCause::DeviceRefused : OomCause::Limit);
}

// Keeps the first `size` bytes of free chunk `c` and returns the rest to the pool when worth keeping:
// at least 512 B in the small pool and in expandable segments, more than 1 MiB in fixed large ones.
void split(DeviceState& s, Chunk* c, size_t size) {
  const size_t rest = c->size - size;
  if ((c->segment->small || c->segment->expandable) ? rest < kRoundBytes : rest <= kSmallRequest) return;
  s.pool_insert(cut(s, c, size));
}

}  // namespace

Chunk* take_chunk(DeviceState& s, const Block& b, const cuda::Stream& stream, bool may_fail) {
  process_events(s, false);  // blocks whose other streams have finished become reusable
  // Only matters when the limit was lowered below what is reserved: cached bytes past it are off limits too.
  if (s.stats.limit > 0 && s.stats.allocated + int64_t(b.size) > s.stats.limit) {
    if (may_fail) return nullptr;
    throw_oom(s, b, stream, 0, OomCause::Limit);
  }
  bool small = b.size <= kSmallRequest;
  auto& pool = s.pool(small);
  for (bool first = true;; first = false) {
    if (s.stats.caching) {
      Segment probe_segment;
      probe_segment.stream = stream;
      Chunk probe{0, b.size, &probe_segment};
      auto it = pool.lower_bound(&probe);
      const auto same_stream = [&](FreeSet::iterator i) {
        return i != pool.end() && stream_key(*i) == stream_key(&probe);
      };
      if (same_stream(it)) {
        // A free block in front of unmapped pages can grow: it is the last choice, so that the
        // segment grows least (PyTorch's "expandable size" in its best fit).
        if (grows(*it))
          for (auto other = std::next(it); same_stream(other); ++other)
            if (!grows(*other)) {
              it = other;
              break;
            }
        Chunk* c = *it;
        s.pool_erase(pool, it);
        ++s.stats.cache_hits;
        split(s, c, b.size);
        return c;
      }
    }
    if (Chunk* c = new_memory(s, b, small, stream, first, may_fail)) {
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
    SegmentInfo si;
    si.address = base, si.serial = seg->serial, si.size = int64_t(seg->reserved()), si.small_pool = seg->small;
    si.expandable = seg->expandable, si.virtual_size = int64_t(seg->size);
    for (Chunk* c = seg->head; c; c = c->next)
      if (c->mapped) si.extent = int64_t(c->addr + c->size - base);
    for (Chunk* c = seg->head; c && c->addr < base + uint64_t(si.extent); c = c->next) {
      BlockInfo bi;
      bi.address = c->addr;
      bi.size = int64_t(c->size);
      bi.mapped = c->mapped;
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
