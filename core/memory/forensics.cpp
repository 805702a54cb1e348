// Fragmentation forensics: for a request (or none), where the cached bytes are (each pool's holes by
// size), whether a free block holds it, which live blocks split the room it would need, what would
// make it fit, and the reason in plain words. Every out-of-memory error carries them.
#include <algorithm>
#include <mutex>

#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/memory/allocator_impl.h>

namespace mg {

OutOfMemoryError::OutOfMemoryError(const std::string& message, std::shared_ptr<const Fragmentation> forensics)
    : Error(forensics ? message + "\n" + forensics->str() : message), fragmentation_(std::move(forensics)) {}

namespace memory::impl {

namespace {

constexpr int64_t kPageBytes = int64_t(kExpandablePage);
constexpr int64_t kNoLimit = INT64_MAX / 4;  // headroom without a limit: the device's answer is unknown

BlockRef ref(const Chunk* c) {
  BlockRef r;
  r.address = c->addr;
  r.size = int64_t(c->size);
  if (const Block* b = c->block) {
    r.category = b->category;
    r.owner = b->owner();
    r.op = b->op ? b->op : "";
  } else {
    r.owner = "(released; waiting for other streams)";
  }
  return r;
}

void add_hole(PoolFragmentation& p, int64_t size) {
  p.free_bytes += size;
  p.largest_free = std::max(p.largest_free, size);
  int64_t from = 1;
  while (from <= size / 2) from *= 2;
  auto bin =
      std::find_if(p.by_hole_size.begin(), p.by_hole_size.end(), [&](const HoleSizeBin& h) { return h.from >= from; });
  if (bin == p.by_hole_size.end() || bin->from != from) bin = p.by_hole_size.insert(bin, {from, 2 * from, 0, 0});
  ++bin->holes;
  bin->bytes += size;
}

// The bytes of whole pages (counted from the segment's start) inside chunk `c`.
int64_t whole_pages(const Chunk* c) {
  const int64_t begin = int64_t(c->addr - c->segment->base), end = begin + int64_t(c->size);
  return std::max<int64_t>(0, end / kPageBytes * kPageBytes - (begin + kPageBytes - 1) / kPageBytes * kPageBytes);
}

// A candidate for SplitHole: the chunks first..last of one segment, with the free and live bytes
// among them.
struct Run {
  const Chunk *first, *last;
  int64_t free, pinned, count;
};

// The runs of consecutive chunks in `seg` (between unmapped pages) from a free chunk to a free chunk
// whose free bytes hold `size` and that hold live blocks: for each last chunk, the shortest one.
void find_runs(const Segment* seg, int64_t size, std::vector<Run>& out) {
  std::vector<const Chunk*> run;
  auto scan = [&] {
    int64_t free_sum = 0, live_sum = 0, live_count = 0;
    size_t i = 0;
    for (size_t j = 0; j < run.size(); ++j) {
      const int64_t n = int64_t(run[j]->size);
      if (!run[j]->is_free()) {
        live_sum += n, ++live_count;
        continue;
      }
      free_sum += n;
      // Drop holes from the front while the rest still holds the request, then the live blocks
      // before the next hole: a run starts with a hole.
      while (i < j) {
        const int64_t front = int64_t(run[i]->size);
        if (run[i]->is_free()) {
          if (free_sum - front < size) break;
          free_sum -= front;
        } else {
          live_sum -= front, --live_count;
        }
        ++i;
      }
      if (free_sum >= size && live_count > 0) out.push_back({run[i], run[j], free_sum, live_sum, live_count});
    }
  };
  for (const Chunk* c = seg->head; c; c = c->next) {
    if (c->mapped) {
      run.push_back(c);
      continue;
    }
    scan();
    run.clear();
  }
  scan();
}

// When no run holds `size`: in `seg`, each stretch between unmapped pages from its first hole to its
// last, with live blocks inside: the live blocks that split the most room the segment has, though
// freeing them would not make enough.
void find_spans(const Segment* seg, std::vector<Run>& out) {
  const Chunk *first = nullptr, *last = nullptr;
  int64_t free_sum = 0, live_sum = 0, live_count = 0, live_after = 0, count_after = 0;
  auto flush = [&] {
    if (first && live_count > 0) out.push_back({first, last, free_sum, live_sum, live_count});
    first = last = nullptr, free_sum = live_sum = live_count = live_after = count_after = 0;
  };
  for (const Chunk* c = seg->head; c; c = c->next) {
    if (!c->mapped) {
      flush();
    } else if (c->is_free()) {
      if (!first) first = c;
      last = c, free_sum += int64_t(c->size);
      live_sum += live_after, live_count += count_after, live_after = count_after = 0;
    } else if (first) {  // counted once a hole follows it
      live_after += int64_t(c->size), ++count_after;
    }
  }
  flush();
}

// The fewest pinned bytes first (with `most_free`: the most free bytes first), then the fewest
// blocks, the lowest address; of overlapping runs only the first; at most 3.
std::vector<SplitHole> best_split_holes(std::vector<Run> runs, bool most_free) {
  std::stable_sort(runs.begin(), runs.end(), [&](const Run& a, const Run& b) {
    if (most_free && a.free != b.free) return a.free > b.free;
    if (a.pinned != b.pinned) return a.pinned < b.pinned;
    if (a.count != b.count) return a.count < b.count;
    return a.first->addr < b.first->addr;
  });
  std::vector<SplitHole> r;
  for (const Run& run : runs) {
    const uintptr_t begin = run.first->addr, end = run.last->addr + run.last->size;
    if (r.size() == 3) break;
    if (std::any_of(r.begin(), r.end(),
                    [&](const SplitHole& k) { return begin < k.address + uint64_t(k.size) && k.address < end; }))
      continue;
    SplitHole h;
    h.segment = run.first->segment->base, h.address = begin, h.size = int64_t(end - begin);
    for (const Chunk* c = run.first;; c = c->next) {
      if (c->is_free())
        h.free_bytes += int64_t(c->size), h.largest_hole = std::max(h.largest_hole, int64_t(c->size));
      else
        h.pinning.push_back(ref(c));
      if (c == run.last) break;
    }
    r.push_back(std::move(h));
  }
  return r;
}

const char* pool_name(bool small) { return small ? "small" : "large"; }
const char* pool_users(bool small) { return small ? "small requests (up to 1 MiB)" : "requests over 1 MiB"; }

std::string reason(const Fragmentation& f, OomCause cause, int64_t headroom) {
  const bool small = f.small_request;
  const PoolFragmentation &mine = f.pools[small ? 0 : 1], &other = f.pools[small ? 1 : 0];
  const std::string request = format_bytes(f.request), cached = format_bytes(f.cached);
  if (cause == OomCause::TooLarge)
    return "no device can address " + format_byte_count(memory::kMaxRequest) + " or more; the cache was not asked";
  if (cause == OomCause::Injected)
    return "injected by memory::fail_allocation_after (a test hook); the cache was not asked";
  if (f.limit > 0 && f.allocated + f.request > f.limit)
    return "the request alone passes the limit: " + format_bytes(f.allocated) + " allocated + " + request + " > " +
           format_bytes(f.limit) + ", so no arrangement of the cache could hold it";
  if (!f.caching) return "caching is off: every block has a segment of its own and nothing is cached";
  if (f.fits_in_cache) return "a free block of the " + std::string(pool_name(small)) + " pool holds it";
  const int64_t here = mine.free_bytes - f.other_streams;  // in the request's pool, on its stream
  std::string r;
  if (here >= f.request) {
    r = format_bytes(here) + " is free in the " + pool_name(small) + " pool, but in holes of at most " +
        format_bytes(mine.largest_free) +
        (!f.split_holes.empty() && f.split_holes[0].free_bytes >= f.request
             ? ": live blocks split the room it needs"
             : " spread over segments, none of which has " + request + " free even around its live blocks");
  } else {
    if (other.free_bytes > 0 && other.free_bytes + here >= f.request)
      r = cached + " is cached, but " + (here > 0 ? format_bytes(other.free_bytes) + " of it " : "") + "in the " +
          pool_name(!small) + " pool, which " + pool_users(small) + " do not use";
    else if (f.other_streams > 0 && f.other_streams + here >= f.request)
      r = cached + " is cached, but " + format_bytes(f.other_streams) + " of it in segments of other streams";
    else
      r = f.cached > 0 ? "only " + cached + " is cached" : "nothing is cached";
    if (here > 0) r += "; the " + std::string(pool_name(small)) + " pool's holes hold " + format_bytes(here);
  }
  const std::string more = f.expandable ? "mapping " + format_bytes(f.new_memory) + " more of its expandable segment"
                                        : "a new segment of " + format_bytes(f.new_memory);
  if (cause == OomCause::DeviceRefused) return r + "; and the device refused " + more;
  if (cause == OomCause::AddressSpace)
    return r + "; and the system refused the address space of a new expandable segment (an address-space limit)";
  if (f.limit == 0) return r;
  return r + "; and " + more + " does not fit in the " + format_bytes(std::max<int64_t>(0, headroom)) +
         " the limit leaves";
}

}  // namespace

Fragmentation analyze(DeviceState& s, const Block* b, const cuda::Stream& stream, OomCause cause) {
  Fragmentation f;
  const MemoryStats& st = s.stats;
  f.device = s.device;
  f.limit = st.limit, f.allocated = st.allocated, f.reserved = st.reserved, f.cached = st.reserved - st.active;
  f.caching = st.caching, f.expandable = expandable(s);
  f.request = b ? int64_t(std::min<size_t>(b->size, INT64_MAX)) : 0;
  f.small_request = b && b->size <= kSmallRequest;
  f.pools[0].small_pool = true;
  const uintptr_t key = reinterpret_cast<uintptr_t>(stream.handle());
  int64_t free_pages = 0;  // whole free pages anywhere: what expandable segments could map again
  for (auto& [base, seg] : s.segments) {
    PoolFragmentation& p = f.pools[seg->small ? 0 : 1];
    ++p.segments;
    p.reserved += int64_t(seg->reserved());
    const bool request_pool = b && seg->small == f.small_request, here = stream_key(seg->head) == key;
    bool live = false;
    for (const Chunk* c = seg->head; c; c = c->next) {
      if (!c->is_free()) {
        live |= c->mapped;
        continue;
      }
      add_hole(p, int64_t(c->size));
      free_pages += whole_pages(c);
      if (seg->expandable) p.releasable += whole_pages(c);
      if (request_pool && here && int64_t(c->size) >= f.request) f.fits_in_cache = true;
      if (request_pool && !here) f.other_streams += int64_t(c->size);
    }
    if (!seg->expandable && !live) p.releasable += int64_t(seg->size);
  }
  if (!b) {
    f.reason = !f.caching ? "caching is off: nothing is cached"
               : f.cached ? format_bytes(f.cached) + " is cached, in free blocks of at most " +
                                format_bytes(f.pools[0].largest_free) + " in the small pool and " +
                                format_bytes(f.pools[1].largest_free) + " in the large one"
                          : "nothing is cached";
    return f;
  }
  // What growing would add: the request's own size (the smallest segment the allocator makes under a
  // limit), or the pages an expandable segment maps beyond its free tail.
  int64_t tail = 0;
  if (auto it = s.growing.find({key, f.small_request}); it != s.growing.end())
    for (const Chunk* u : it->second->unmapped)
      if (u->prev && u->prev->is_free()) tail = std::max(tail, int64_t(u->prev->size));
  const auto pages = [](int64_t n) { return (std::max<int64_t>(0, n) + kPageBytes - 1) / kPageBytes * kPageBytes; };
  f.new_memory = f.expandable ? pages(f.request - tail) : f.request;
  const int64_t headroom = f.limit ? f.limit - f.reserved : kNoLimit;
  // Past any address space, or the address space the system allows (or a test's injected failure),
  // nothing would make it fit.
  const bool passes = (f.limit > 0 && f.allocated + f.request > f.limit) || cause == OomCause::TooLarge ||
                      cause == OomCause::Injected || cause == OomCause::AddressSpace;
  const PoolFragmentation &mine = f.pools[f.small_request ? 0 : 1], &other = f.pools[f.small_request ? 1 : 0];
  const int64_t releasable = mine.releasable + other.releasable;
  f.fits_after_empty_cache = !passes && headroom + releasable >= f.new_memory;
  f.fits_with_other_pool = !passes && headroom + mine.releasable + other.free_bytes >= f.new_memory;
  f.fits_expandable = !passes && headroom + free_pages >= pages(f.request - (f.expandable ? tail : 0));
  if (!f.fits_in_cache && f.caching) {
    std::vector<Run> runs, spans;
    for (auto& [base, seg] : s.segments)
      if (seg->small == f.small_request && stream_key(seg->head) == key)
        find_runs(seg, f.request, runs), find_spans(seg, spans);
    const bool enough = !runs.empty();
    f.split_holes = best_split_holes(enough ? std::move(runs) : std::move(spans), !enough);
  }
  f.reason = reason(f, cause, headroom);
  return f;
}

}  // namespace memory::impl

std::string HoleSizeBin::range() const {
  auto pow2 = [](int64_t v) {  // "512 KiB": a power of two in binary units
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (v >= 1024 && u < 6) v /= 1024, ++u;
    return std::to_string(v) + " " + units[u];
  };
  return pow2(from) + "-" + pow2(to);
}

std::string Fragmentation::str() const {
  std::string r = (request ? "Why the cache could not serve it: " : "Cached bytes: ") + reason + ".";
  for (const PoolFragmentation& p : pools) {
    r += mg::detail::str("\n  ", p.small_pool ? "small" : "large", " pool: ", p.segments, " segment",
                         p.segments == 1 ? "" : "s", ", ", format_bytes(p.reserved), " reserved, ",
                         format_bytes(p.free_bytes), " free");
    if (p.free_bytes) r += ", largest free block " + format_bytes(p.largest_free);
    if (p.releasable) r += ", " + format_bytes(p.releasable) + " of it releasable by empty_cache()";
    if (!p.by_hole_size.empty()) r += "; by hole size:";
    for (const HoleSizeBin& h : p.by_hole_size)
      r += mg::detail::str(" ", h.range(), " ", h.holes, " hole", h.holes == 1 ? "" : "s", " ", format_bytes(h.bytes),
                           ";");
  }
  if (!split_holes.empty())
    r += mg::detail::str("\n  live blocks that split the ", small_request ? "small" : "large", " pool's free room (",
                         split_holes[0].free_bytes >= request ? "with them freed it would fit"
                                                              : "the most room there is; even freed, too little",
                         "):");
  for (const SplitHole& h : split_holes) {
    r += mg::detail::str("\n    ", format_bytes(h.free_bytes), " free in ", format_bytes(h.size), " at 0x", std::hex,
                         h.address, std::dec, " (holes up to ", format_bytes(h.largest_hole), "), split by");
    for (const BlockRef& b : h.pinning)
      r += mg::detail::str(" \"", b.owner, "\" ", category_name(b.category), b.op.empty() ? "" : " (" + b.op + ")", " ",
                           format_bytes(b.size), ";");
  }
  if (request) {
    auto yes = [](bool v) { return v ? "yes" : "no"; };
    r += mg::detail::str("\n  would it fit under the limit? after empty_cache(): ", yes(fits_after_empty_cache),
                         "; with the ", small_request ? "large" : "small",
                         " pool's cached bytes returned too: ", yes(fits_with_other_pool),
                         "; with expandable segments: ", yes(fits_expandable));
    if (fits_expandable && !expandable)
      r += " (set_allocator_config(\"expandable_segments:True\"), MG_ALLOC_CONF=expandable_segments:True, or memgrad "
           "train --expandable-segments)";
  }
  return r;
}

Fragmentation fragmentation(const Device& d, int64_t request) {
  MG_CHECK(request >= 0, ValueError, "fragmentation: expected a request of >= 0 bytes, got ", request);
  memory::impl::DeviceState& s = memory::impl::state(d);
  const cuda::Stream stream = d.is_cuda() ? cuda::current_stream(d.index) : cuda::Stream();
  Block probe;
  probe.size = memory::round_size(size_t(request));
  std::lock_guard<std::mutex> g(s.mu);
  return memory::impl::analyze(s, request ? &probe : nullptr, stream, memory::impl::OomCause::Limit);
}

}  // namespace mg
