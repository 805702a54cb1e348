// The memory timeline page (memory::write_timeline): its data against the ledger, snapshots read
// back, and snapshots refused. What the page's script shows in a browser: tests/browser.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "mlp.h"
#include "timeline_page.h"

using namespace mg;
using nlohmann::json;

namespace {

// Named by the process too: other checkouts may run the same tests at the same time.
std::string temp_name(const std::string& name) { return "memgrad_test_" + std::to_string(::getpid()) + "_" + name; }
std::string temp_path(const std::string& name) { return std::string(P_tmpdir) + "/" + temp_name(name); }

// An MLP training step recorded from an empty allocator, with its stats at the end.
struct RecordedStep {
  MemoryStats stats;
  std::vector<MemoryEvent> events;
};
RecordedStep record_step(int64_t batch) {
  RecordedStep r;
  record_history(true, 1 << 20);
  mlp::train_step(kCPU, batch);
  r.stats = memory_stats(kCPU);
  r.events = memory_history();
  return r;
}

}  // namespace

TEST_CASE("timeline: the page's blocks add up to the ledger at every point, and at the peak to its breakdown") {
  IsolatedAllocator fresh(kCPU);
  RecordedStep step = record_step(64);
  const std::string path = temp_path("timeline.html");
  memory::write_timeline(path, kCPU, "MLP training step");
  // MG_TIMELINE_OUT=docs/memory_timeline.html writes the example page kept in docs/.
  if (const char* out = std::getenv("MG_TIMELINE_OUT"))
    memory::write_timeline(out, kCPU, "3-layer MLP training step, batch 64");
  record_history(false);
  const std::string html = timeline_page::read_file(path);
  std::remove(path.c_str());
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("</html>") != std::string::npos);
  for (const char* external : {"src=", "href=", "@import", "url(", "http:", "https:"})  // nothing from elsewhere
    CHECK_MESSAGE(html.find(external) == std::string::npos, external);

  const json data = timeline_page::data(html);
  REQUIRE(data["runs"].size() == 1);
  const json& run = data["runs"][0];
  CHECK(run["title"] == "MLP training step");
  CHECK(run["before"] == 0);  // a fresh allocator: nothing before the recording
  const auto allocated = timeline_page::sums(run["points"]["allocated"]);
  std::vector<std::vector<int64_t>> cat;
  for (auto& c : run["points"]["cat"]) cat.push_back(timeline_page::sums(c));
  size_t ledger_events = 0;
  for (auto& e : step.events)
    ledger_events += e.device == kCPU && (e.kind == MemoryEventKind::Alloc || e.kind == MemoryEventKind::Free ||
                                          e.kind == MemoryEventKind::Relabel);
  REQUIRE(allocated.size() == ledger_events);
  for (size_t p = 0; p < allocated.size(); ++p) {
    const auto b = timeline_page::breakdown(run, int64_t(p));
    for (int c = 0; c < kNumCategories; ++c) REQUIRE(b.by_category[size_t(c)] == cat[size_t(c)][p]);
  }
  // The peak is the ledger's, and its breakdown by owner the one the ledger captured then.
  const int64_t peak = run["peak"];
  CHECK(allocated[size_t(peak)] == step.stats.peak_allocated);
  const auto at_peak = timeline_page::breakdown(run, peak);
  std::map<std::string, int64_t> ledger_owners;
  for (auto& [owner, bytes] : step.stats.at_peak_by_owner)
    if (bytes) ledger_owners[owner] = bytes;
  CHECK(at_peak.by_owner == ledger_owners);
  for (int c = 0; c < kNumCategories; ++c)
    CHECK(at_peak.by_category[size_t(c)] == step.stats.at_peak_by_category[size_t(c)]);
  // The phases the step annotated, and the activations saved for backward.
  std::vector<std::string> marks;
  for (size_t i = 0; i < run["marks"]["kind"].size(); ++i)
    marks.push_back(run["marks"]["kind"][i].get<std::string>() + " " +
                    run["strings"][run["marks"]["text"][i].get<size_t>()].get<std::string>());
  CHECK(marks == std::vector<std::string>{"phase forward", "phase backward", "phase optimizer"});
  int saved = 0;
  for (auto& f : run["blocks"]["flags"]) saved += f.get<int>() & 1;
  CHECK(saved > 0);
}

TEST_CASE("timeline: blocks made before the recording come from the allocator's layout") {
  IsolatedAllocator fresh(kCPU);
  mlp::Model model = mlp::make(kCPU);  // parameters, allocated before
  record_history(true);
  Tensor y = mlp::param(model, 0) * 2.0;
  const std::string path = temp_path("before.html");
  memory::write_timeline(path, kCPU);
  record_history(false);
  const json run = timeline_page::data(timeline_page::read_file(path))["runs"][0];
  std::remove(path.c_str());
  const int64_t params = memory_stats(kCPU).allocated - int64_t(y.nbytes());
  CHECK(run["before"] == params);
  const auto b = timeline_page::breakdown(run, 0);
  CHECK(b.by_owner.at("fc1.weight") == int64_t(mlp::param(model, 0).nbytes()));
  CHECK(b.by_category[size_t(Category::Parameter)] == params);
}

TEST_CASE("timeline: a ring buffer that dropped the oldest events still adds up") {
  IsolatedAllocator fresh(kCPU);
  record_history(true, 60);  // far fewer than the step makes
  mlp::train_step(kCPU, 64);
  const MemoryStats stats = memory_stats(kCPU);
  const std::string path = temp_path("ring.html");
  memory::write_timeline(path, kCPU);
  record_history(false);
  const json run = timeline_page::data(timeline_page::read_file(path))["runs"][0];
  std::remove(path.c_str());
  CHECK(run["events"] == 60);
  CHECK(run["before"].get<int64_t>() > 0);  // what the dropped events had allocated
  const auto allocated = timeline_page::sums(run["points"]["allocated"]);
  REQUIRE(!allocated.empty());
  CHECK(allocated.back() == stats.allocated);
  for (size_t p = 0; p < allocated.size(); ++p) {
    int64_t sum = 0;
    for (auto& [owner, bytes] : timeline_page::breakdown(run, int64_t(p)).by_owner) sum += bytes;
    REQUIRE(sum == allocated[p]);
  }
}

TEST_CASE("timeline: a snapshot draws the same page as the live history, and two are compared") {
  IsolatedAllocator fresh(kCPU);
  record_step(32);
  const std::string live = temp_path("live.html"), a = temp_path("a.json"), b = temp_path("b.json"),
                    out = temp_path("view.html");
  memory::write_timeline(live, kCPU, "step");
  dump_snapshot(a, "step");
  record_history(false);
  memory::write_snapshot_timeline(out, {a});
  json from_file = timeline_page::data(timeline_page::read_file(out))["runs"][0];
  json from_live = timeline_page::data(timeline_page::read_file(live))["runs"][0];
  CHECK(from_file["source"] == temp_name("a.json"));
  from_file.erase("source"), from_live.erase("source");
  CHECK(from_file == from_live);

  {
    IsolatedAllocator other(kCPU);
    record_step(64);
    dump_snapshot(b);
    record_history(false);
  }
  memory::write_snapshot_timeline(out, {a, b});
  const json two = timeline_page::data(timeline_page::read_file(out));
  REQUIRE(two["runs"].size() == 2);
  CHECK(two["runs"][1]["title"] == temp_name("b.json"));  // no title: the file's name
  CHECK(timeline_page::read_file(out).find("<title>Memory timelines compared: " + temp_name("a.json") + " vs " +
                                           temp_name("b.json") + "</title>") != std::string::npos);
  for (auto& f : {live, a, b, out}) std::remove(f.c_str());
}

// Each way a snapshot can be wrong, and the one line that says so.
TEST_CASE("timeline: memgrad view refuses a snapshot that is not one, or whose numbers do not add up") {
  IsolatedAllocator fresh(kCPU);
  record_step(16);
  const std::string good = temp_path("good.json"), bad = temp_path("bad.json"), out = temp_path("bad.html");
  dump_snapshot(good);
  record_history(false);
  const json doc = json::parse(timeline_page::read_file(good));
  const std::string text = timeline_page::read_file(good);
  size_t alloc = 0;  // the first allocation of the history
  while (doc["history"][alloc]["kind"] != "alloc") ++alloc;
  auto edited = [&](auto&& edit) {
    json d = doc;
    edit(d);
    return d.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"hello", "not a memgrad memory snapshot: not JSON"},
      {"", "empty, not a memgrad memory snapshot"},
      {R"({"format": "something else"})", "not a memgrad memory snapshot"},
      {text.substr(0, text.size() / 2), "truncated"},
      {edited([](json& d) { d["version"] = 1; }), "a version 1 snapshot; this memgrad reads versions 2 and 3"},
      {edited([&](json& d) { d["history"][alloc]["bytes"] = -512; }), "bytes is -512, expected a size >= 0"},
      {edited([&](json& d) { d["history"][alloc]["category"] = "Cache"; }), "unknown category \"Cache\""},
      {edited([&](json& d) { d["history"][alloc]["by_category"]["Cache"] = 0; }), "unknown category \"Cache\""},
      {edited([&](json& d) { d["history"][alloc]["kind"] = "malloc"; }), "unknown event kind \"malloc\""},
      {edited([&](json& d) { d["history"][alloc].erase("owner"); }), "missing \"owner\""},
      {edited([&](json& d) { d["history"][alloc + 1]["time_ns"] = 0, d["history"][alloc]["time_ns"] = 5; }),
       "out of order"},
      {edited([&](json& d) { d["history"][alloc]["allocated"] = 1 << 20; }), "its categories sum to"},
      // Consistent in itself, but not with the events around it.
      {edited([&](json& d) {
         d["history"][alloc]["bytes"] = d["history"][alloc]["bytes"].get<int64_t>() + 512;
         d["history"][alloc]["carved"] = d["history"][alloc]["carved"].get<int64_t>() + 512;
       }),
       "(alloc at 0x"},
      {edited([&](json& d) { d["history"][alloc]["carved"] = 0; }), "carved is 0, less than its bytes"},
      {edited([&](json& d) { d["devices"][0]["segments"][0].erase("extent"); }), "missing \"extent\""},
      {edited([&](json& d) { d["devices"][0]["segments"][0]["blocks"][0]["state"] = "unmapped"; }),
       "expected active, free, pending or (in an expandable segment) unmapped"},
      {edited([&](json& d) { d["devices"][0]["fragmentation"]["pools"][1]["free_bytes"] = 1; }),
       "its holes by size add up to"},
      {edited([&](json& d) { d["devices"][0].erase("fragmentation"); }), "missing \"fragmentation\""},
      {edited([&](json& d) { d["devices"][0]["segments"][0]["blocks"][0]["address"] = 512; }), "do not tile"},
      {edited([&](json& d) { d["history"] = json::array(); }), "no history"},
  };
  for (const auto& [contents, message] : cases) {
    CAPTURE(message);
    std::ofstream(bad, std::ios::binary) << contents;
    std::remove(out.c_str());
    try {
      memory::write_snapshot_timeline(out, {bad});
      FAIL("accepted");
    } catch (const IOError& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.rfind(bad + ": ", 0) == 0, what);
      CHECK_MESSAGE(what.find(message) != std::string::npos, what);
      CHECK_MESSAGE(what.find('\n') == std::string::npos, what);
    }
    CHECK_MESSAGE(!std::ifstream(out).good(), "a page was written");
  }
  expect_error<IOError>([&] { memory::write_snapshot_timeline(out, {temp_path("missing.json")}); }, {"no such file"});
  expect_error<IOError>([&] { memory::write_snapshot_timeline(out, {good}, "cuda:3"); },
                        {"no history of device cuda:3"});
  expect_error<ValueError>([&] { memory::write_snapshot_timeline(out, {}); }, {"one snapshot"});
  for (auto& f : {good, bad, out}) std::remove(f.c_str());
}

TEST_CASE("timeline: with no history the page says so") {
  const std::string path = temp_path("empty.html");
  record_history(true);
  memory::write_timeline(path, kMeta);
  record_history(false);
  const json run = timeline_page::data(timeline_page::read_file(path))["runs"][0];
  std::remove(path.c_str());
  CHECK(run["points"]["allocated"].empty());
  CHECK(run["peak"] == -1);
}
