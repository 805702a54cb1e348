// Fragmentation forensics: for crafted layouts, the exact holes by pool and size, the largest hole,
// the live blocks that pin them, what would make the request fit and the reason, in the
// OutOfMemoryError (message and struct), the history's oom event, the snapshot and memory_summary.
#include <doctest/doctest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>
#include <memgrad/report/timeline.h>

#include "layout_check.h"
#include "timeline_page.h"

using namespace mg;
using namespace layout_check;

namespace {

// Allocates `bytes` as `owner` (Activation, in op matmul).
Block* owned(Blocks& b, int64_t bytes, const std::string& owner) {
  MemoryScope scope(Category::Activation, owner);
  OpScope op(Op::matmul);
  return b.get(bytes);
}

// The OutOfMemoryError that `f` raises (REQUIREd).
OutOfMemoryError oom_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const OutOfMemoryError& e) {
    return e;
  }
  FAIL("no OutOfMemoryError");
  return OutOfMemoryError("");
}

}  // namespace

TEST_CASE("forensics: 12 MiB free in holes of 4 MiB, split by two live blocks, does not hold 10 MiB") {
  IsolatedAllocator fresh(kMeta, 24 * MiB);
  record_history(true, 1000);
  Blocks b;
  // One 20 MiB large-pool segment filled with A 4 | B 2 | C 4 | D 2 | E 4 | F 4 MiB, and a small block.
  Block* a = owned(b, 4 * MiB, "a");
  Block* bb = owned(b, 2 * MiB, "b");
  Block* c = owned(b, 4 * MiB, "c");
  Block* d = owned(b, 2 * MiB, "d");
  Block* e = owned(b, 4 * MiB, "e");
  owned(b, 4 * MiB, "f");
  owned(b, 512, "s");
  b.put(a), b.put(c), b.put(e);  // three holes of 4 MiB; 22 MiB reserved, 2 left under the limit
  const OutOfMemoryError err = oom_of([&] { owned(b, 10 * MiB, "big"); });
  REQUIRE(err.fragmentation());
  const Fragmentation& f = *err.fragmentation();
  CHECK(f.request == 10 * MiB);
  CHECK_FALSE(f.small_request);
  CHECK(f.reserved == 22 * MiB);
  CHECK(f.cached == 12 * MiB + 2 * MiB - 512);
  const PoolFragmentation &small = f.pools[0], &large = f.pools[1];
  CHECK(small.small_pool);
  CHECK(small.segments == 1);
  CHECK(small.free_bytes == 2 * MiB - 512);
  CHECK(small.largest_free == 2 * MiB - 512);
  REQUIRE(small.by_hole_size.size() == 1);
  CHECK((small.by_hole_size[0].from == MiB && small.by_hole_size[0].holes == 1));
  CHECK(large.segments == 1);
  CHECK(large.reserved == 20 * MiB);
  CHECK(large.free_bytes == 12 * MiB);
  CHECK(large.largest_free == 4 * MiB);  // the largest hole
  CHECK(large.releasable == 0);
  REQUIRE(large.by_hole_size.size() == 1);
  CHECK(large.by_hole_size[0].from == 4 * MiB);
  CHECK(large.by_hole_size[0].to == 8 * MiB);
  CHECK(large.by_hole_size[0].holes == 3);
  CHECK(large.by_hole_size[0].bytes == 12 * MiB);
  CHECK(large.by_hole_size[0].range() == "4 MiB-8 MiB");
  CHECK_FALSE(f.fits_in_cache);
  CHECK(f.new_memory == 10 * MiB);
  // Freeing B and D would turn A..E into 16 MiB with 12 MiB free in one run: the pinning blocks.
  REQUIRE(f.split_holes.size() == 1);
  const SplitHole& h = f.split_holes[0];
  CHECK(h.address == addr(a));
  CHECK(h.size == 16 * MiB);
  CHECK(h.free_bytes == 12 * MiB);
  CHECK(h.largest_hole == 4 * MiB);
  REQUIRE(h.pinning.size() == 2);
  CHECK(h.pinning[0].address == addr(bb));
  CHECK(h.pinning[0].owner == "b");
  CHECK(h.pinning[0].size == 2 * MiB);
  CHECK(h.pinning[0].category == Category::Activation);
  CHECK(h.pinning[0].op == "matmul");
  CHECK(h.pinning[1].address == addr(d));
  CHECK(h.pinning[1].owner == "d");
  CHECK_FALSE(f.fits_after_empty_cache);  // 2 MiB under the limit, no segment entirely free
  CHECK_FALSE(f.fits_with_other_pool);    // + the small pool's 2 MiB: 4 MiB
  CHECK(f.fits_expandable);               // + the holes' 6 whole pages: 14 MiB
  CHECK(f.reason ==
        "12.00 MiB is free in the large pool, but in holes of at most 4.00 MiB: live blocks split the room it needs; "
        "and a new segment of 10.00 MiB does not fit in the 2.00 MiB the limit leaves");
  const std::string what = err.what();
  for (const char* part : {"Why the cache could not serve it: 12.00 MiB is free in the large pool",
                           "large pool: 1 segment, 20.00 MiB reserved, 12.00 MiB free, largest free block 4.00 MiB",
                           "by hole size: 4 MiB-8 MiB 3 holes 12.00 MiB;", "\"b\" Activation (matmul) 2.00 MiB;",
                           "\"d\" Activation (matmul) 2.00 MiB;", "with expandable segments: yes"})
    CHECK_MESSAGE(what.find(part) != std::string::npos, part, " missing from: ", what);
  // The history's oom event carries them, and so does a snapshot (read back field by field).
  const std::vector<MemoryEvent> events = memory_history();
  REQUIRE(events.back().kind == MemoryEventKind::Oom);
  REQUIRE(events.back().fragmentation);
  CHECK(events.back().fragmentation->split_holes.at(0).pinning.at(1).owner == "d");
  const std::string snapshot = std::string(P_tmpdir) + "/memgrad_forensics.json";
  dump_snapshot(snapshot);
  const nlohmann::json doc = nlohmann::json::parse(timeline_page::read_file(snapshot));
  const nlohmann::json& oom = doc["history"].back();
  CHECK(oom["fragmentation"]["pools"][1]["largest_free"] == 4 * MiB);
  CHECK(oom["fragmentation"]["split_holes"][0]["pinning"][0]["owner"] == "b");
  const std::string page = std::string(P_tmpdir) + "/memgrad_forensics.html";
  CHECK_NOTHROW(memory::write_snapshot_timeline(page, {snapshot}, "meta"));  // the reader accepts them
  const nlohmann::json run = timeline_page::data(timeline_page::read_file(page))["runs"][0];
  REQUIRE(run["forensics"].size() == 1);
  CHECK(run["forensics"][0]["blocks"].size() == 2);  // the page's numbers of B and D
  CHECK(run["forensics"][0]["reason"] == f.reason);
  std::remove(snapshot.c_str());
  std::remove(page.c_str());
  record_history(false);
}

TEST_CASE("forensics: a small request with the cache in the large pool") {
  IsolatedAllocator fresh(kMeta, 20 * MiB);
  Blocks b;
  owned(b, 4 * MiB, "weights");  // a 20 MiB large segment: the whole limit
  const OutOfMemoryError err = oom_of([&] { owned(b, 512 * KiB, "bias"); });
  const Fragmentation& f = *err.fragmentation();
  CHECK(f.small_request);
  CHECK(f.pools[1].free_bytes == 16 * MiB);
  CHECK(f.split_holes.empty());
  CHECK(f.reason ==
        "16.00 MiB is cached, but in the large pool, which small requests (up to 1 MiB) do not use; and a new "
        "segment of 512.00 KiB does not fit in the 0 B the limit leaves");
  CHECK(f.fits_with_other_pool);
  CHECK(f.fits_expandable);
  CHECK_FALSE(f.fits_after_empty_cache);
  // With expandable segments it fits: the large segment's free pages are unmapped and mapped again.
  set_allocator_config("expandable_segments:True");
  {
    IsolatedAllocator expandable(kMeta, 20 * MiB);
    Blocks e;
    owned(e, 4 * MiB, "weights");
    e.put(owned(e, 16 * MiB, "more"));  // 20 MiB mapped in the large segment: the limit
    CHECK_NOTHROW(owned(e, 512 * KiB, "bias"));
    CHECK(memory_stats(kMeta).num_retries == 1);  // the large segment's free pages were unmapped
    CHECK(memory_stats(kMeta).reserved == 6 * MiB);
    check_consistent(kMeta);
  }
  set_allocator_config("expandable_segments:False");
}

TEST_CASE("forensics: the state alone, in memory_summary; the request alone past the limit") {
  IsolatedAllocator fresh(kMeta, 8 * MiB);
  Blocks b;
  owned(b, 3 * MiB, "x");
  b.put(owned(b, MiB + 512 * KiB, "y"));
  const Fragmentation f = fragmentation(kMeta);  // under the limit: segments of the requests' sizes
  CHECK(f.request == 0);
  CHECK(f.pools[1].segments == 2);
  CHECK(f.pools[1].free_bytes == 3 * MiB / 2);
  CHECK(f.pools[1].releasable == 3 * MiB / 2);
  CHECK(f.reason ==
        "1.50 MiB is cached, in free blocks of at most 0 B in the small pool and 1.50 MiB in the large one");
  const std::string summary = memory_summary(kMeta);
  for (const char* part : {"Pools: small / large", "large holes 1 MiB-2 MiB"})
    CHECK_MESSAGE(summary.find(part) != std::string::npos, part, " missing from:\n", summary);
  const OutOfMemoryError err = oom_of([&] { owned(b, 6 * MiB, "z"); });
  CHECK(err.fragmentation()->reason ==
        "the request alone passes the limit: 3.00 MiB allocated + 6.00 MiB > 8.00 MiB, so no arrangement of the cache "
        "could hold it");
  CHECK_THROWS_AS(fragmentation(kMeta, -1), ValueError);
}

TEST_CASE("forensics: the free bytes spread over segments, none of which would hold the request") {
  IsolatedAllocator fresh(kMeta, 41 * MiB);
  Blocks b;
  // Two 20 MiB segments: a 6 | p 2 | x 6 | q 6 MiB and c 6 | r 2 | d 6 | s 6 MiB; a, x and c freed.
  Block* a = owned(b, 6 * MiB, "a");
  Block* p = owned(b, 2 * MiB, "p");
  Block* x = owned(b, 6 * MiB, "x");
  owned(b, 6 * MiB, "q");
  Block* c = owned(b, 6 * MiB, "c");
  owned(b, 2 * MiB, "r"), owned(b, 6 * MiB, "d"), owned(b, 6 * MiB, "s");
  b.put(a), b.put(x), b.put(c);  // 18 MiB free, at most 12 MiB of it in one segment
  const OutOfMemoryError err = oom_of([&] { owned(b, 13 * MiB, "big"); });
  const Fragmentation& f = *err.fragmentation();
  CHECK(f.pools[1].free_bytes == 18 * MiB);
  CHECK(f.pools[1].largest_free == 6 * MiB);
  CHECK(f.new_memory == 13 * MiB);
  // No run of any segment holds 13 MiB: the span with the most free bytes, and the block that splits it.
  REQUIRE(f.split_holes.size() == 1);  // c's segment has one hole and no live block inside it
  const SplitHole& h = f.split_holes[0];
  CHECK(h.address == addr(a));
  CHECK(h.size == 14 * MiB);
  CHECK(h.free_bytes == 12 * MiB);
  CHECK(h.largest_hole == 6 * MiB);
  REQUIRE(h.pinning.size() == 1);
  CHECK(h.pinning[0].address == addr(p));
  CHECK(h.pinning[0].owner == "p");
  CHECK(f.reason ==
        "18.00 MiB is free in the large pool, but in holes of at most 6.00 MiB spread over segments, none of which has "
        "13.00 MiB free even around its live blocks; and a new segment of 13.00 MiB does not fit in the 1.00 MiB the "
        "limit leaves");
  CHECK_FALSE(f.fits_after_empty_cache);
  CHECK(f.fits_expandable);  // 1 MiB + the holes' 9 whole pages
  const std::string what = err.what();
  CHECK_MESSAGE(what.find("free room (the most room there is; even freed, too little):") != std::string::npos, what);
  CHECK_MESSAGE(what.find("\"p\" Activation (matmul) 2.00 MiB;") != std::string::npos, what);
}
