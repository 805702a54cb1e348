// History, snapshot and summary (the timeline page: test_timeline.cpp).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mlp.h"

using namespace mg;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string temp_path(const char* name) { return std::string(P_tmpdir) + "/memgrad_test_" + name; }

}  // namespace

TEST_CASE("history: events with bytes, category, owner and op, in order") {
  set_caching(kMeta, true);
  empty_cache(kMeta);
  record_history(true, 100);
  CHECK(recording_history());
  {
    MemoryScope scope(Category::Parameter, "layer");
    OpScope op(Op::matmul);
    Block* b = memory::allocate(kMeta, 1000, Category::Temporary);
    memory::set_category(b, Category::Gradient);
    annotate_memory("step 1", kMeta);
    memory::release(b);
  }
  empty_cache(kMeta);
  auto ev = memory_history();
  record_history(false);
  CHECK_FALSE(recording_history());
  REQUIRE(ev.size() == 6);
  using K = MemoryEventKind;
  K kinds[] = {K::SegmentAlloc, K::Alloc, K::Relabel, K::Annotation, K::Free, K::SegmentFree};
  for (size_t i = 0; i < 6; ++i) CHECK(ev[i].kind == kinds[i]);
  CHECK(ev[0].bytes == 2 << 20);
  CHECK(ev[1].bytes == 1024);
  CHECK(ev[1].requested == 1000);
  CHECK(ev[1].category == Category::Parameter);
  CHECK(ev[1].owner == "layer");
  CHECK(ev[1].op == "matmul");
  CHECK(ev[1].allocated == 1024);
  CHECK(ev[1].by_category[size_t(Category::Parameter)] == 1024);
  CHECK(ev[2].previous_category == Category::Parameter);
  CHECK(ev[2].category == Category::Gradient);
  CHECK(ev[2].by_category[size_t(Category::Gradient)] == 1024);
  CHECK(ev[3].note == "step 1");
  CHECK(ev[4].allocated == 0);
  CHECK(ev[4].address == ev[1].address);
  CHECK(ev[5].reserved == 0);
  for (size_t i = 1; i < ev.size(); ++i) CHECK(ev[i].time_ns >= ev[i - 1].time_ns);
  CHECK(memory_history().empty());  // off: nothing kept, nothing recorded
  memory::release(memory::allocate(kMeta, 1, Category::Other));
  CHECK(memory_history().empty());
}

TEST_CASE("history: the ring buffer keeps the newest entries") {
  record_history(true, 4);
  for (int i = 0; i < 10; ++i) annotate_memory(std::to_string(i), kMeta);
  auto ev = memory_history();
  record_history(false);
  REQUIRE(ev.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(ev[size_t(i)].note == std::to_string(6 + i));
}

TEST_CASE("snapshot: JSON with the stats, segments, blocks and history") {
  set_caching(kMeta, true);
  empty_cache(kMeta);
  record_history(true, 1000);
  Block* a;
  Block* b;
  {
    MemoryScope scope(Category::Input, "data");
    a = memory::allocate(kMeta, 3000, Category::Other);
    b = memory::allocate(kMeta, 3 << 20, Category::Other);
  }
  std::string path = temp_path("snapshot.json");
  dump_snapshot(path);
  record_history(false);
  auto doc = nlohmann::json::parse(read_file(path));
  std::remove(path.c_str());
  CHECK(doc["format"] == "memgrad-memory-snapshot");
  const nlohmann::json* meta = nullptr;
  for (auto& d : doc["devices"])
    if (d["device"] == "meta") meta = &d;
  REQUIRE(meta != nullptr);
  auto segs = memory_segments(kMeta);
  REQUIRE((*meta)["segments"].size() == segs.size());
  int64_t active = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    auto& js = (*meta)["segments"][i];
    CHECK(js["size"] == segs[i].size);
    CHECK(js["pool"] == (segs[i].small_pool ? "small" : "large"));
    REQUIRE(js["blocks"].size() == segs[i].blocks.size());
    for (auto& jb : js["blocks"])
      if (jb["state"] == "active") {
        active += jb["allocated"].get<int64_t>();
        CHECK(jb["owner"] == "data");
        CHECK(jb["category"] == "Input");
      }
  }
  CHECK(active == 3072 + (3 << 20));
  CHECK((*meta)["stats"]["allocated"] == memory_stats(kMeta).allocated);
  size_t allocs = 0;
  for (auto& e : doc["history"]) allocs += e["kind"] == "alloc" && e["device"] == "meta";
  CHECK(allocs == 2);
  memory::release(a);
  memory::release(b);
  CHECK_THROWS_AS(dump_snapshot("/nonexistent-dir/x.json"), IOError);
}

TEST_CASE("summary: a table with the stats and the breakdown at the peak") {
  empty_cache(kMeta);
  reset_peak(kMeta);
  Block* b;
  {
    MemoryScope scope(Category::OptimizerState, "fc1.weight.exp_avg");
    b = memory::allocate(kMeta, 3 << 20, Category::Other);
  }
  std::string s = memory_summary(kMeta);
  memory::release(b);
  for (const char* part :
       {"memgrad memory summary, device meta", "Allocated (rounded)", "Reserved (segments)", "OptimizerState",
        "Activation", "Top owners at the peak", "fc1.weight.exp_avg", "3.00 MiB", "20.00 MiB", "Largest free block"})
    CHECK_MESSAGE(s.find(part) != std::string::npos, part, " missing from:\n", s);
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(-(3 << 20)) == "-3.00 MiB");
}

TEST_CASE("history: a relabel names the owner and category before; segment events name their pool") {
  IsolatedAllocator fresh(kMeta);
  record_history(true);
  Block* b;
  {
    MemoryScope scope(Category::Temporary, "x");
    b = memory::allocate(kMeta, 1000, Category::Other);
  }
  memory::set_owner(b, "x.grad");
  memory::set_category(b, Category::Gradient);
  memory::release(memory::allocate(kMeta, 3 << 20, Category::Other));
  memory::release(b);
  empty_cache(kMeta);
  const std::vector<MemoryEvent> ev = memory_history();
  record_history(false);
  std::vector<const MemoryEvent*> relabels, segments;
  for (auto& e : ev) {
    if (e.kind == MemoryEventKind::Relabel) relabels.push_back(&e);
    if (e.kind == MemoryEventKind::SegmentAlloc || e.kind == MemoryEventKind::SegmentFree) segments.push_back(&e);
  }
  REQUIRE(relabels.size() == 2);
  CHECK(relabels[0]->owner == "x.grad");
  CHECK(relabels[0]->previous_owner == "x");
  CHECK(relabels[0]->category == Category::Temporary);
  CHECK(relabels[0]->previous_category == Category::Temporary);
  CHECK(relabels[0]->allocated == 1024);
  CHECK(relabels[1]->owner == "x.grad");
  CHECK(relabels[1]->previous_owner == "x.grad");
  CHECK(relabels[1]->category == Category::Gradient);
  CHECK(relabels[1]->previous_category == Category::Temporary);
  REQUIRE(segments.size() == 4);  // the small segment, the large one, and both returned by empty_cache
  for (auto* s : segments) CHECK(s->small_pool == (s->bytes == memory::kSmallSegment));
  CHECK(segments[0]->small_pool);
  CHECK_FALSE(segments[1]->small_pool);
}
