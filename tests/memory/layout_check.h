// Shared by the allocator's suites: raw blocks released at the end of a scope, and the invariants of
// the ledger against the segment layout that must hold at every moment.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include <memgrad/core/allocator.h>

namespace layout_check {

using namespace mg;

inline constexpr int64_t KiB = 1024, MiB = 1024 * 1024;

// Allocates raw blocks and releases whatever is left when it goes out of scope.
struct Blocks {
  Device device;
  std::vector<Block*> live;
  explicit Blocks(Device d = kMeta) : device(d) {}
  ~Blocks() {
    for (Block* b : live) memory::release(b);
  }
  Block* get(int64_t bytes, Category c = Category::Other) {
    live.push_back(memory::allocate(device, size_t(bytes), c));
    return live.back();
  }
  void put(Block* b) {
    live.erase(std::find(live.begin(), live.end(), b));
    memory::release(b);
  }
};

inline uint64_t addr(const Block* b) { return reinterpret_cast<uint64_t>(b->ptr); }

// Starts a test from an empty meta device with caching on and no limit.
inline void fresh_meta() {
  set_caching(kMeta, true);
  set_memory_limit(kMeta, 0);
  empty_cache(kMeta);
  REQUIRE(memory_stats(kMeta).allocated == 0);
  REQUIRE(memory_stats(kMeta).reserved == 0);
  reset_peak(kMeta);
}

// The invariants that must hold at every moment, checked against the segment layout.
inline void check_consistent(const Device& d) {
  MemoryStats s = memory_stats(d);
  CHECK(std::accumulate(s.by_category.begin(), s.by_category.end(), int64_t(0)) == s.allocated);
  int64_t reserved = 0, active = 0, allocated = 0, free_bytes = 0, largest_free = 0;
  auto segments = memory_segments(d);
  for (auto& seg : segments) {
    reserved += seg.size;
    uint64_t next = seg.address;
    int64_t mapped = 0;
    for (auto& b : seg.blocks) {
      CHECK(b.address == next);  // blocks tile the segment
      next += uint64_t(b.size);
      if (!b.mapped) {
        CHECK(seg.expandable);
        CHECK_FALSE(b.in_use);
        CHECK((b.address - seg.address) % memory::kExpandablePage == 0);  // whole pages
        CHECK(b.size % int64_t(memory::kExpandablePage) == 0);
        continue;
      }
      mapped += b.size;
      if (b.in_use)
        active += b.size, allocated += b.allocated;
      else
        free_bytes += b.size, largest_free = std::max(largest_free, b.size);
    }
    CHECK(next == seg.address + uint64_t(seg.extent));
    CHECK(mapped == seg.size);
    if (seg.expandable)
      CHECK((seg.size % int64_t(memory::kExpandablePage) == 0 && seg.extent <= seg.virtual_size));
    else
      CHECK((seg.extent == seg.size && seg.virtual_size == seg.size));
  }
  CHECK(int64_t(segments.size()) == s.num_segments);
  CHECK(reserved == s.reserved);
  CHECK(active == s.active);
  CHECK(allocated == s.allocated);
  CHECK(free_bytes == s.cached());
  CHECK(largest_free == s.largest_free_block);
  CHECK(s.peak_allocated >= s.allocated);
  CHECK(s.peak_reserved >= s.reserved);
}

}  // namespace layout_check
