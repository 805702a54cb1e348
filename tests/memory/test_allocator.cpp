// The caching allocator on its own: rounding, pools, splitting, merging, the cache, limits,
// stats arithmetic and threads. Layout tests run on the meta device (addresses, no bytes), which
// goes through the very same pools as cpu and cuda; the thread test runs on cpu with real bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <memgrad/core/allocator.h>
#include <memgrad/core/error.h>

#include "layout_check.h"

using namespace mg;
using namespace layout_check;

TEST_CASE("allocator: requests round up to 512 B; requested bytes are kept apart") {
  CHECK(memory::round_size(0) == 512);
  CHECK(memory::round_size(1) == 512);
  CHECK(memory::round_size(512) == 512);
  CHECK(memory::round_size(513) == 1024);
  CHECK(memory::round_size(1000000) == 1000448);
  fresh_meta();
  Blocks b;
  b.get(1);
  b.get(513);
  MemoryStats s = memory_stats(kMeta);
  CHECK(s.allocated == 512 + 1024);
  CHECK(s.requested == 1 + 513);
  CHECK(s.active == 512 + 1024);
  check_consistent(kMeta);
}

TEST_CASE("allocator: pool choice and segment sizes") {
  fresh_meta();
  Blocks b;
  auto last_segment_size = [] {
    MemoryStats s = memory_stats(kMeta);
    return s.reserved;
  };
  SUBCASE("up to 1 MiB: small pool, 2 MiB segments") {
    b.get(MiB);
    CHECK(last_segment_size() == 2 * MiB);
    auto segs = memory_segments(kMeta);
    REQUIRE(segs.size() == 1);
    CHECK(segs[0].small_pool);
    b.get(MiB);  // the rest of the same segment
    CHECK(memory_stats(kMeta).num_segments == 1);
    b.get(512);  // a new one
    CHECK(memory_stats(kMeta).reserved == 4 * MiB);
  }
  SUBCASE("1-10 MiB: large pool, 20 MiB segments") {
    b.get(MiB + 1);
    CHECK(last_segment_size() == 20 * MiB);
    CHECK_FALSE(memory_segments(kMeta)[0].small_pool);
    b.get(9 * MiB);
    CHECK(memory_stats(kMeta).num_segments == 1);
  }
  SUBCASE("10 MiB and more: a segment of the request rounded to 2 MiB") {
    b.get(10 * MiB);
    CHECK(last_segment_size() == 10 * MiB);
    b.get(11 * MiB + 1);
    CHECK(last_segment_size() == 10 * MiB + 12 * MiB);
  }
  check_consistent(kMeta);
}

TEST_CASE("allocator: splitting keeps worthwhile tails, best fit picks the tightest block") {
  fresh_meta();
  Blocks b;
  Block* a = b.get(512);
  Block* c = b.get(1000);
  CHECK(addr(c) == addr(a) + 512);  // carved from the same segment, back to back
  auto seg = memory_segments(kMeta)[0];
  REQUIRE(seg.blocks.size() == 3);
  CHECK(seg.blocks[2].size == 2 * MiB - 512 - 1024);
  CHECK_FALSE(seg.blocks[2].in_use);

  // Large pool: a tail of at most 1 MiB stays with its block (active > allocated).
  Block* big = b.get(11 * MiB + 512 * KiB);  // segment of 12 MiB, tail 0.5 MiB
  MemoryStats s = memory_stats(kMeta);
  CHECK(s.active - s.allocated == 512 * KiB);
  CHECK(memory::round_size(big->requested) == big->size);
  // ... while a larger tail is split off: 3 MiB out of a 20 MiB segment leaves 17 MiB free.
  b.get(3 * MiB);
  CHECK(memory_stats(kMeta).largest_free_block == 17 * MiB);

  // Best fit: with free holes of 4 KiB and 1 KiB, a 1 KiB request takes the 1 KiB hole.
  Block* h4 = b.get(4 * KiB);
  Block* sep = b.get(512);
  Block* h1 = b.get(KiB);
  b.get(512);
  uint64_t hole1 = addr(h1);
  b.put(h4);
  b.put(h1);
  (void)sep;
  Block* again = b.get(KiB);
  CHECK(addr(again) == hole1);
  check_consistent(kMeta);
}

TEST_CASE("allocator: freed blocks merge with free neighbours; a freed block is reused") {
  fresh_meta();
  Blocks b;
  Block* x = b.get(512);
  Block* y = b.get(512);
  Block* z = b.get(512);
  uint64_t base = addr(x);
  b.put(y);
  b.put(x);  // merges with y's hole
  auto seg = memory_segments(kMeta)[0];
  REQUIRE(seg.blocks.size() == 3);
  CHECK(seg.blocks[0].size == 1024);
  CHECK_FALSE(seg.blocks[0].in_use);
  b.put(z);  // merges both sides: the whole segment is one free block again
  seg = memory_segments(kMeta)[0];
  REQUIRE(seg.blocks.size() == 1);
  CHECK(seg.blocks[0].size == 2 * MiB);

  int64_t hits = memory_stats(kMeta).cache_hits, segments = memory_stats(kMeta).num_segment_allocs;
  Block* w = b.get(100);
  CHECK(addr(w) == base);
  CHECK(memory_stats(kMeta).cache_hits == hits + 1);
  CHECK(memory_stats(kMeta).num_segment_allocs == segments);
  check_consistent(kMeta);
}

TEST_CASE("allocator: empty_cache returns only the segments with no live block") {
  fresh_meta();
  const int64_t segment_frees = memory_stats(kMeta).num_segment_frees;
  {
    Blocks b;
    b.get(512);
    Block* big = b.get(2 * MiB);
    b.put(big);
    CHECK(memory_stats(kMeta).reserved == 2 * MiB + 20 * MiB);
    empty_cache(kMeta);
    MemoryStats s = memory_stats(kMeta);
    CHECK(s.reserved == 2 * MiB);
    CHECK(s.num_segments == 1);
    CHECK(s.num_segment_frees == segment_frees + 1);
    check_consistent(kMeta);
  }
  CHECK(memory_stats(kMeta).reserved == 2 * MiB);  // freed blocks stay cached
  empty_cache(kMeta);
  CHECK(memory_stats(kMeta).reserved == 0);
  check_consistent(kMeta);
}

TEST_CASE("allocator: caching off gives each allocation its own segment") {
  fresh_meta();
  set_caching(kMeta, false);
  const int64_t hits = memory_stats(kMeta).cache_hits;
  {
    Blocks b;
    b.get(512);
    b.get(3 * MiB + 100);
    MemoryStats s = memory_stats(kMeta);
    CHECK(s.reserved == 512 + 3 * MiB + 512);
    CHECK(s.num_segments == 2);
    CHECK(s.cache_hits == hits);
    CHECK_FALSE(s.caching);
    check_consistent(kMeta);
  }
  MemoryStats s = memory_stats(kMeta);
  CHECK(s.reserved == 0);
  CHECK(s.num_segments == 0);
  set_caching(kMeta, true);
}

TEST_CASE("allocator: stats arithmetic, categories, owners and peaks") {
  fresh_meta();
  MemoryStats s0 = memory_stats(kMeta);
  Blocks b;
  {
    MemoryScope scope(Category::Parameter, "model");
    MemoryScope inner("fc1");
    b.get(1000, Category::Input);  // the scope's category wins over the fallback
  }
  Block* act = b.get(2048, Category::Temporary);
  memory::set_category(act, Category::Activation);
  Block* tmp = b.get(4096, Category::Temporary);
  MemoryStats s = memory_stats(kMeta);
  CHECK(s.category(Category::Parameter) == 1024);
  CHECK(s.category(Category::Activation) == 2048);
  CHECK(s.category(Category::Temporary) == 4096);
  CHECK(s.peak(Category::Temporary) == 4096);
  CHECK(s.peak(Category::Activation) == 2048);
  CHECK(s.allocated == 1024 + 2048 + 4096);
  CHECK(s.peak_allocated == s.allocated);
  CHECK(s.num_allocs - s0.num_allocs == 3);
  CHECK(memory_by_owner(kMeta).at("model.fc1") == 1024);
  b.put(tmp);
  s = memory_stats(kMeta);
  CHECK(s.allocated == 1024 + 2048);
  CHECK(s.peak_allocated == 1024 + 2048 + 4096);
  CHECK(s.at_peak(Category::Temporary) == 4096);
  CHECK(s.at_peak(Category::Activation) == 2048);
  CHECK(s.at_peak_by_owner.at("model.fc1") == 1024);
  CHECK(s.total_allocated - s0.total_allocated == 7168);
  CHECK(s.total_freed - s0.total_freed == 4096);
  reset_peak(kMeta);
  s = memory_stats(kMeta);
  CHECK(s.peak_allocated == 1024 + 2048);
  CHECK(s.peak(Category::Temporary) == 0);
  check_consistent(kMeta);
}

// The owner breakdown at the peak is taken lazily (core/memory/ledger.cpp, settle_peak): it must still be the
// one at the moment of the peak after owners change, blocks are freed and a lower rise follows.
TEST_CASE("allocator: owners at the peak are those of the peak's moment") {
  IsolatedAllocator fresh(kMeta);
  Blocks b;
  Block *x, *y;
  {
    MemoryScope scope("x");
    x = b.get(1024);
  }
  {
    MemoryScope scope("y");
    y = b.get(2048);
  }
  memory::set_owner(x, "renamed");  // at the peak, x still belonged to "x"
  CHECK(memory_stats(kMeta).at_peak_by_owner == std::map<std::string, int64_t>{{"x", 1024}, {"y", 2048}});
  b.put(y);
  Block* z = b.get(512);  // a rise below the peak takes nothing from it
  (void)z;
  MemoryStats s = memory_stats(kMeta);
  CHECK(s.at_peak_by_owner == std::map<std::string, int64_t>{{"x", 1024}, {"y", 2048}});
  CHECK(memory_by_owner(kMeta) == std::map<std::string, int64_t>{{"", 512}, {"renamed", 1024}});
  Block* w = b.get(4096);  // a new peak: the breakdown now
  (void)w;
  CHECK(memory_stats(kMeta).at_peak_by_owner == std::map<std::string, int64_t>{{"", 4608}, {"renamed", 1024}});
}

TEST_CASE("allocator: past the limit the cache is emptied and the request retried, else OutOfMemoryError") {
  fresh_meta();
  set_memory_limit(kMeta, 4 * MiB);
  Blocks b;
  SUBCASE("retry after emptying the cache") {
    b.put(b.get(512));  // leaves a cached 2 MiB small segment
    int64_t retries = memory_stats(kMeta).num_retries;
    b.get(3 * MiB);  // 2 + 3 MiB > 4 MiB: the cached segment goes, then a 3 MiB segment fits
    MemoryStats s = memory_stats(kMeta);
    CHECK(s.num_retries == retries + 1);
    CHECK(s.reserved == 3 * MiB);  // under a limit a request-sized segment replaces the 20 MiB one
    check_consistent(kMeta);
  }
  SUBCASE("out of memory: the message, then the program goes on") {
    {
      MemoryScope scope(Category::Parameter, "encoder.weight");
      b.get(3 * MiB);
    }
    MemoryStats before = memory_stats(kMeta);
    std::string message;
    {
      MemoryScope scope(Category::Activation, "decoder");
      OpScope op(Op::linear);
      try {
        b.get(2 * MiB);
      } catch (const OutOfMemoryError& e) {
        message = e.what();
      }
    }
    REQUIRE_FALSE(message.empty());
    for (const char* part :
         {"out of memory on meta", "tried to allocate 2.00 MiB", "in linear", "\"decoder\"", "limit 4.00 MiB",
          "allocated 3.00 MiB", "reserved 3.00 MiB", "free 1.00 MiB", "Parameter 3.00 MiB",
          "Top owners: encoder.weight 3.00 MiB", "checkpoint", "half precision", "smaller batch", "accumulate"})
      CHECK_MESSAGE(message.find(part) != std::string::npos, part, " missing from: ", message);
    // autocast keeps float32 weights, and can save more activation bytes than float32 (docs/memory.md)
    CHECK(message.find("weights and activations in half precision") == std::string::npos);
    CHECK(message.find("storage with float32 master weights") != std::string::npos);
    MemoryStats after = memory_stats(kMeta);
    CHECK(after.num_ooms == before.num_ooms + 1);
    CHECK(after.allocated == before.allocated);
    CHECK(after.num_allocs == before.num_allocs);
    check_consistent(kMeta);
    b.get(MiB);  // a smaller request still fits
    CHECK(memory_stats(kMeta).allocated == 4 * MiB);
  }
  SUBCASE("a limit lowered below what is reserved also refuses cached bytes past it") {
    b.put(b.get(3 * MiB));  // a cached 3 MiB segment
    set_memory_limit(kMeta, 2 * MiB);
    b.get(2 * MiB);  // a cache hit within the limit
    CHECK(memory_stats(kMeta).reserved == 3 * MiB);
    CHECK_THROWS_AS(b.get(512), OutOfMemoryError);
    check_consistent(kMeta);
  }
  set_memory_limit(kMeta, 0);
  CHECK_THROWS_AS(set_memory_limit(kMeta, -1), ValueError);
}

TEST_CASE("allocator: MG_MEMORY_LIMIT values") {
  using memory::limit_from_env;
  CHECK(limit_from_env("1048576", DeviceType::CPU) == MiB);
  CHECK(limit_from_env("512M", DeviceType::CPU) == 512 * MiB);
  CHECK(limit_from_env("512M", DeviceType::CUDA) == 512 * MiB);
  CHECK(limit_from_env("512M", DeviceType::Meta) == 0);  // a plain value caps real devices only
  CHECK(limit_from_env("1.5GiB", DeviceType::CPU) == 1536 * MiB);
  CHECK(limit_from_env("64kb", DeviceType::CPU) == 64 * KiB);
  CHECK(limit_from_env("cpu=1G,meta=2K", DeviceType::Meta) == 2 * KiB);
  CHECK(limit_from_env("cpu=1G,meta=2K", DeviceType::CPU) == 1024 * MiB);
  CHECK(limit_from_env("cpu=1G,meta=2K", DeviceType::CUDA) == 0);
  CHECK_THROWS_AS(limit_from_env("lots", DeviceType::CPU), ValueError);
  CHECK_THROWS_AS(limit_from_env("12X", DeviceType::CPU), ValueError);
  CHECK_THROWS_AS(limit_from_env("gpu=1G", DeviceType::CPU), ValueError);
}

TEST_CASE("allocator: concurrent allocation and release from several threads") {
  for (Device d : {kCPU, kMeta}) {
    MemoryStats s0 = memory_stats(d);
    const int kThreads = 4, kRounds = 3000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([d, t] {
        std::mt19937 rng{unsigned(t)};
        std::vector<Block*> mine;
        for (int i = 0; i < kRounds; ++i) {
          if (mine.empty() || rng() % 3 != 0) {
            size_t n = rng() % 4 == 0 ? size_t(rng() % (3 << 20)) : size_t(rng() % 8192);
            mine.push_back(memory::allocate(d, n, Category::Temporary));
            if (d.is_cpu() && n) static_cast<char*>(mine.back()->ptr)[n - 1] = char(i);  // the bytes are there
          } else {
            size_t k = rng() % mine.size();
            memory::release(mine[k]);
            mine[k] = mine.back();
            mine.pop_back();
          }
        }
        for (Block* b : mine) memory::release(b);
      });
    for (auto& th : threads) th.join();
    MemoryStats s = memory_stats(d);
    CHECK(s.allocated == s0.allocated);
    CHECK(s.requested == s0.requested);
    CHECK(s.num_allocs - s0.num_allocs == s.num_frees - s0.num_frees);
    CHECK(s.category(Category::Temporary) == s0.category(Category::Temporary));
    check_consistent(d);
  }
}

TEST_CASE("allocator: off cuda there is one stream: a block released on one thread is reused at once on another") {
  // cuda pools are per stream (the thread's current one) with deferred frees; host and meta blocks
  // must stay shared by all threads and reusable the moment they are released.
  for (Device d : {kCPU, kMeta}) {
    empty_cache(d);
    MemoryStats s0 = memory_stats(d);
    Block* a = memory::allocate(d, size_t(3 * MiB), Category::Other);
    const uint64_t first = addr(a);
    std::thread([a] { memory::release(a); }).join();
    MemoryStats s1 = memory_stats(d);
    CHECK(s1.active == s0.active);  // nothing waits: the block is cached free at once
    CHECK(s1.allocated == s0.allocated);
    Block* b = nullptr;
    std::thread([&b, d] { b = memory::allocate(d, size_t(3 * MiB), Category::Other); }).join();
    CHECK(addr(b) == first);
    CHECK(memory_stats(d).cache_hits == s1.cache_hits + 1);
    memory::release(b);
    check_consistent(d);
  }
}

TEST_CASE("allocator: an IsolatedAllocator is a fresh device for this thread, and its blocks go back to it") {
  Blocks outside(kMeta);
  outside.get(3 * MiB);  // the device's own allocator holds a segment with room to spare
  const MemoryStats before = memory_stats(kMeta);
  {
    IsolatedAllocator fresh(kMeta, 4 * MiB);
    CHECK(memory_stats(kMeta).reserved == 0);  // the device's segments are not seen
    CHECK(memory_stats(kMeta).limit == 4 * MiB);
    Blocks inside(kMeta);
    inside.get(512 * KiB);
    CHECK(memory_stats(kMeta).allocated == 512 * KiB);
    CHECK(memory_stats(kMeta).reserved == 2 * MiB);          // a small-pool segment of its own
    CHECK_THROWS_AS(inside.get(3 * MiB), OutOfMemoryError);  // its limit
    std::thread other(
        [&] { CHECK(memory_stats(kMeta).allocated == before.allocated); });  // another thread: the device's
    other.join();
    {
      IsolatedAllocator nested(kMeta);
      CHECK(memory_stats(kMeta).allocated == 0);
    }
    CHECK(memory_stats(kMeta).allocated == 512 * KiB);
  }
  CHECK(memory_stats(kMeta).allocated == before.allocated);
  CHECK(memory_stats(kMeta).reserved == before.reserved);
  // A block that outlives its allocator is still returned to it, not to the device's.
  Block* survivor = nullptr;
  {
    IsolatedAllocator fresh(kMeta);
    survivor = memory::allocate(kMeta, 1000, Category::Other);
  }
  memory::release(survivor);
  CHECK(memory_stats(kMeta).allocated == before.allocated);
  CHECK(memory_stats(kMeta).reserved == before.reserved);
  CHECK_THROWS_AS(IsolatedAllocator(kMeta, -1), ValueError);
}

TEST_CASE("allocator: among equal free blocks the oldest segment's is taken, whatever the addresses") {
  // Two segments, each with one free 4 MiB block; the request takes the one in the segment made first.
  // On meta addresses grow with each segment; on the CPU malloc decides them, and the choice must
  // not depend on that, or a plan could not predict a real device's reserved bytes.
  for (const Device& d : {kMeta, kCPU}) {
    CAPTURE(d);
    IsolatedAllocator fresh(d);
    Blocks b(d);
    Block* a1 = b.get(8 * MiB);  // segment 0 (20 MiB): [a1 8][keep 12]
    Block* keep1 = b.get(12 * MiB);
    Block* a2 = b.get(8 * MiB);  // segment 1
    Block* keep2 = b.get(12 * MiB);
    (void)keep1, (void)keep2;
    b.put(a2);
    b.put(a1);
    const auto segments = memory_segments(d);
    REQUIRE(segments.size() == 2);
    const uint64_t first = std::min_element(segments.begin(), segments.end(), [](auto& x, auto& y) {
                             return x.serial < y.serial;
                           })->address;
    Block* c = b.get(8 * MiB);
    CHECK(addr(c) == first);
  }
}
