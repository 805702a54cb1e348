// Expandable segments (set_allocator_config("expandable_segments:True")): the configuration and its
// errors, one growing segment per pool, pages mapped at the lowest room and unmapped by empty_cache,
// the ledger's invariants and the history's map events at every step, meta equal to cpu, and
// what they save against fixed segments under a limit.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>
#include <memgrad/report/timeline.h>

#include "expect_error.h"
#include "layout_check.h"

using namespace mg;
using namespace layout_check;

namespace {

constexpr int64_t kPage = int64_t(memory::kExpandablePage);

// Expandable segments on (or off) for a scope.
struct Expandable {
  bool before;
  explicit Expandable(bool on = true) : before(allocator_config().expandable_segments) {
    set_allocator_config(on ? "expandable_segments:True" : "expandable_segments:False");
  }
  ~Expandable() { set_allocator_config(before ? "expandable_segments:True" : "expandable_segments:False"); }
};

}  // namespace

TEST_CASE("expandable: the configuration, spelled as PYTORCH_CUDA_ALLOC_CONF; bad strings are refused") {
  Expandable restore(false);
  CHECK_FALSE(allocator_config().expandable_segments);
  set_allocator_config("expandable_segments:True");
  CHECK(allocator_config().expandable_segments);
  set_allocator_config("expandable_segments:False,");
  CHECK_FALSE(allocator_config().expandable_segments);
  set_allocator_config("");  // nothing said: nothing changes
  CHECK_FALSE(allocator_config().expandable_segments);
  set_allocator_config("expandable_segments:True");
  set_allocator_config(",");
  CHECK(allocator_config().expandable_segments);
  set_allocator_config("expandable_segments:False");
  expect_error<ValueError>([] { set_allocator_config("expandable_segments:maybe"); },
                           {"expandable_segments takes True or False, got \"maybe\"",
                            "the accepted keys are expandable_segments (True or False)"});
  expect_error<ValueError>([] { set_allocator_config("max_split_size_mb:128"); },
                           {"unknown key \"max_split_size_mb\"", "the accepted keys are expandable_segments"});
  expect_error<ValueError>([] { set_allocator_config("expandable_segments"); }, {"takes True or False, got \"\""});
  CHECK_FALSE(allocator_config().expandable_segments);  // a refused string changes nothing
}

TEST_CASE("expandable: one segment per pool grows page by page, at the lowest room, and shrinks on empty_cache") {
  Expandable on;
  IsolatedAllocator fresh(kMeta);
  Blocks b;
  Block* x = b.get(3 * MiB);
  CHECK(memory_stats(kMeta).reserved == 2 * kPage);  // 3 MiB in 2 MiB pages
  Block* y = b.get(3 * MiB);                         // the free tail (1 MiB) and one page more
  CHECK(addr(y) == addr(x) + 3 * MiB);
  CHECK(memory_stats(kMeta).reserved == 3 * kPage);
  Block* z = b.get(5 * MiB);
  CHECK(addr(z) == addr(y) + 3 * MiB);
  CHECK(memory_stats(kMeta).reserved == 6 * kPage);  // 11 MiB -> 12 MiB mapped
  b.get(KiB);                                        // the small pool: a segment of its own
  auto segs = memory_segments(kMeta);
  REQUIRE(segs.size() == 2);
  for (auto& seg : segs) CHECK(seg.expandable);
  CHECK(memory_stats(kMeta).reserved == 7 * kPage);
  check_consistent(kMeta);

  // A freed block in the middle is a hole; the next request that it holds takes it, others grow the
  // segment (a free block in front of unmapped pages is the last choice).
  b.put(y);
  Block* w = b.get(2 * MiB);
  CHECK(addr(w) == addr(x) + 3 * MiB);
  Block* v = b.get(2 * MiB);  // the 1 MiB left of the hole does not hold it, the 1 MiB free tail neither
  CHECK(addr(v) == addr(z) + 5 * MiB);
  CHECK(memory_stats(kMeta).reserved == 8 * kPage);
  check_consistent(kMeta);

  // empty_cache unmaps every whole free page: here the free tail's; the hole keeps its partial pages.
  b.put(v);
  empty_cache(kMeta);
  CHECK(memory_stats(kMeta).reserved == 7 * kPage);
  CHECK(memory_stats(kMeta).num_unmaps >= 1);
  check_consistent(kMeta);
  b.put(x);
  b.put(w);
  b.put(z);
  empty_cache(kMeta);  // the large segment maps nothing any more: it is gone
  segs = memory_segments(kMeta);
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].small_pool);
  CHECK(memory_stats(kMeta).reserved == kPage);
  check_consistent(kMeta);
}

TEST_CASE("expandable: under a limit, free pages anywhere are unmapped and mapped where the request fits") {
  Expandable on;
  IsolatedAllocator fresh(kMeta, 10 * MiB);
  Blocks b;
  Block* a = b.get(2 * MiB);
  Block* c = b.get(2 * MiB);
  b.get(2 * MiB);
  b.get(2 * MiB);
  Block* f = b.get(3 * MiB / 2);  // 9.5 MiB allocated, 10 MiB mapped: the limit
  b.put(c);                       // a hole of one whole page at offset 2 MiB
  CHECK(memory_stats(kMeta).reserved == 10 * MiB);
  // 2.5 MiB: no free block holds it, and the free tail (0.5 MiB) plus a page passes the limit. The
  // retry unmaps the hole's page, and maps one at the end instead.
  Block* g = b.get(5 * MiB / 2);
  CHECK(addr(g) == addr(f) + 3 * MiB / 2);
  MemoryStats s = memory_stats(kMeta);
  CHECK(s.reserved == 10 * MiB);
  CHECK(s.num_retries == 1);
  auto segs = memory_segments(kMeta);
  REQUIRE(segs.size() == 1);
  REQUIRE(segs[0].blocks.size() >= 2);
  CHECK(segs[0].blocks[1].address == addr(a) + 2 * MiB);
  CHECK_FALSE(segs[0].blocks[1].mapped);
  check_consistent(kMeta);
  // The limit counts mapped bytes: 2 MiB more is refused, though 2 MiB of the range are unmapped.
  CHECK_THROWS_AS(b.get(512), OutOfMemoryError);
  b.put(g);
  const int64_t maps = memory_stats(kMeta).num_maps;
  Block* h = b.get(2 * MiB);  // a free block holds it (the one in front of unmapped pages): nothing mapped
  CHECK(addr(h) == addr(g));
  CHECK(memory_stats(kMeta).num_maps == maps);
  b.put(h);
  b.put(f);
  empty_cache(kMeta);  // the free tail's whole pages go: 8 MiB mapped, 2 of them in a hole no more
  CHECK(memory_stats(kMeta).reserved == 6 * MiB);
  Block* k = b.get(2 * MiB);  // of the rooms that hold it (the hole's page, the end), the lowest
  CHECK(addr(k) == addr(a) + 2 * MiB);
  check_consistent(kMeta);
}

TEST_CASE("expandable: the ledger's invariants and the history's replay hold after every event, cpu and meta alike") {
  Expandable on;
  std::vector<std::pair<int64_t, int64_t>> layouts[2];  // (reserved, allocated) after each step
  for (const Device& d : {kCPU, kMeta}) {
    IsolatedAllocator fresh(d, 64 * MiB);
    record_history(true, 1 << 20);
    std::mt19937 rng(7);
    Blocks b(d);
    for (int i = 0; i < 600; ++i) {
      const bool take = b.live.size() < 4 || rng() % 3 != 0;
      if (take) {
        const int64_t sizes[] = {512, 3000, 100 * KiB, MiB, 1536 * KiB, 3 * MiB, 7 * MiB + 4000};
        try {
          Block* blk = b.get(sizes[rng() % 7]);
          if (d.is_cpu()) std::memset(blk->ptr, 0x5a, blk->size);  // the pages are there, and writable
        } catch (const OutOfMemoryError&) {
        }
      } else {
        b.put(b.live[rng() % b.live.size()]);
      }
      if (i % 97 == 0) empty_cache(d);
      const MemoryStats s = memory_stats(d);
      layouts[d.is_meta()].emplace_back(s.reserved, s.allocated);
      if (i % 50 == 0) check_consistent(d);
    }
    check_consistent(d);
    const std::string page = std::string(P_tmpdir) + "/memgrad_expandable_" + d.str() + ".html";
    CHECK_NOTHROW(memory::write_timeline(page, d));  // replays every event against the layout
    std::remove(page.c_str());
    int64_t maps = 0, unmaps = 0;
    for (const MemoryEvent& e : memory_history()) {
      maps += e.kind == MemoryEventKind::SegmentMap;
      unmaps += e.kind == MemoryEventKind::SegmentUnmap;
      if (e.kind == MemoryEventKind::SegmentMap || e.kind == MemoryEventKind::SegmentUnmap) {
        CHECK(e.expandable);
        CHECK(e.bytes % kPage == 0);
      }
    }
    CHECK(maps == memory_stats(d).num_maps);
    CHECK(unmaps == memory_stats(d).num_unmaps);
    CHECK(unmaps > 0);
    record_history(false);
  }
  CHECK(layouts[0] == layouts[1]);  // meta predicts cpu: the same bytes after every step
}
