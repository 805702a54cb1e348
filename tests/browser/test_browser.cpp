// The memory timeline page in a real browser: its script runs without errors; hovering over a
// known allocation shows that allocation's owner and bytes; clicking shows a breakdown whose sums
// are the ledger's; two runs compare category by category; a page of 100,000 events opens; the
// segment maps show the holes and the blocks that pin them at an out-of-memory error.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <regex>

#include <memgrad/memgrad.h>

#include "browser.h"
#include "memory/layout_check.h"
#include "memory/mlp.h"
#include "timeline_page.h"

using namespace mg;

namespace {

std::string temp_path(const std::string& name) {  // other checkouts may run the same tests at the same time
  return std::string(P_tmpdir) + "/memgrad_browser_" + std::to_string(::getpid()) + "_" + name;
}

std::string thousands(int64_t v) {
  std::string s = std::to_string(v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

int64_t bytes_of(const std::string& dom, const std::string& marker) {
  const auto a = browser::attributes(dom, marker);
  REQUIRE_MESSAGE(a.count("data-bytes"), "no element with ", marker);
  return std::stoll(a.at("data-bytes"));
}

// The page ran its script to the end (and its test hook, when asked), and reported no error.
void expect_clean(const browser::Page& page, bool selftest) {
  CHECK_MESSAGE(browser::text_between(page.dom, "<pre id=\"mg-errors\"", "</pre>").find("error") == std::string::npos,
                browser::text_between(page.dom, "<pre id=\"mg-errors\"", "</pre>"));
  const auto body = browser::attributes(page.dom, "<body");
  CHECK(body.count("data-ready"));
  if (selftest) CHECK(body.count("data-selftest"));
  MESSAGE("the page was drawn " << (body.count("data-ready-ms") ? body.at("data-ready-ms") : "?")
                                << " ms after the browser began loading it; chromium ran " << page.seconds << " s");
}

// Rows of the breakdown: name -> the bytes of each column (data-bytes of its cells).
std::map<std::string, std::vector<int64_t>> rows(const std::string& dom, const char* attr) {
  std::map<std::string, std::vector<int64_t>> r;
  const std::string details = dom.substr(dom.find("<section id=\"details\""));
  const std::regex row(std::string("<tr ") + attr + R"re(="([^"]*)">(.*?)</tr>)re"),
      cell(R"re(data-bytes="(-?\d+)")re");
  for (std::sregex_iterator it(details.begin(), details.end(), row), end; it != end; ++it) {
    const std::string cells = (*it)[2];
    auto& v = r[(*it)[1]];
    for (std::sregex_iterator c(cells.begin(), cells.end(), cell); c != end; ++c) v.push_back(std::stoll((*c)[1]));
  }
  return r;
}

}  // namespace

TEST_CASE("browser: hover shows the allocation under the cursor, click the ledger's breakdown") {
  IsolatedAllocator fresh(kCPU);
  record_history(true, 1 << 20);
  mlp::train_step(kCPU, 64);
  const MemoryStats stats = memory_stats(kCPU);
  const std::vector<MemoryEvent> events = memory_history();
  const std::string path = temp_path("step.html");
  memory::write_timeline(path, kCPU, "MLP training step");
  record_history(false);
  // The allocation to hover: the largest one that is alone in its category's band when made.
  size_t known = events.size();
  for (size_t i = 0; i < events.size(); ++i) {
    const MemoryEvent& e = events[i];
    if (e.kind == MemoryEventKind::Alloc && e.by_category[size_t(e.category)] == e.bytes && !e.owner.empty() &&
        (known == events.size() || e.bytes > events[known].bytes))
      known = i;
  }
  REQUIRE(known < events.size());
  const MemoryEvent& e = events[known];

  const browser::Page page = browser::open(path, "#selftest=hover:" + std::to_string(known) + ",click:peak");
  std::remove(path.c_str());
  expect_clean(page, true);
  const auto tip = browser::attributes(page.dom, "id=\"tooltip\"");
  CHECK(tip.count("hidden") == 0);
  CHECK(tip.count("data-owner"));
  if (tip.count("data-owner")) CHECK(tip.at("data-owner") == e.owner);
  if (tip.count("data-bytes")) CHECK(std::stoll(tip.at("data-bytes")) == e.bytes);
  const std::string shown = browser::text_between(page.dom, "id=\"tooltip\"", "<footer");
  CHECK_MESSAGE(shown.find(e.owner) != std::string::npos, shown);
  CHECK_MESSAGE(shown.find(thousands(e.bytes) + " B") != std::string::npos, shown);
  CHECK_MESSAGE(shown.find(category_name(e.category)) != std::string::npos, shown);

  // The click on the peak: the ledger's bytes, and categories and owners that sum to them.
  const int64_t ledger = bytes_of(page.dom, "data-role=\"ledger\"");
  CHECK(ledger == stats.peak_allocated);
  CHECK(bytes_of(page.dom, "data-role=\"cat-total\"") == ledger);
  CHECK(bytes_of(page.dom, "data-role=\"owner-total\"") == ledger);
  std::map<std::string, int64_t> owners, want;
  for (auto& [name, cells] : rows(page.dom, "data-owner")) owners[name == "(no owner)" ? "" : name] = cells.at(0);
  for (auto& [name, bytes] : stats.at_peak_by_owner)
    if (bytes) want[name] = bytes;
  CHECK(owners == want);
  for (int c = 0; c < kNumCategories; ++c)
    CHECK(rows(page.dom, "data-category").at(category_name(Category(c))).at(0) == stats.at_peak(Category(c)));
  CHECK(browser::attributes(page.dom, "data-role=\"check\"").at("class") == "check ok");
}

TEST_CASE("browser: two runs on one axis, with their difference by category") {
  std::vector<std::string> files;
  for (int64_t batch : {32, 64}) {
    IsolatedAllocator fresh(kCPU);
    record_history(true, 1 << 20);
    mlp::train_step(kCPU, batch);
    files.push_back(temp_path("batch" + std::to_string(batch) + ".json"));
    dump_snapshot(files.back(), "batch " + std::to_string(batch));
    record_history(false);
  }
  const std::string path = temp_path("compare.html");
  memory::write_snapshot_timeline(path, files);
  const browser::Page page = browser::open(path, "#selftest=click:peak");
  for (auto& f : files) std::remove(f.c_str());
  std::remove(path.c_str());
  expect_clean(page, true);
  for (const char* run : {"0", "1"}) {
    const std::string r = std::string("data-run=\"") + run + "\"";
    const int64_t ledger = bytes_of(page.dom, "data-role=\"ledger\" " + r);
    CHECK(bytes_of(page.dom, "data-role=\"owner-total\" " + r) == ledger);
    CHECK(bytes_of(page.dom, "data-role=\"cat-total\" " + r) == ledger);
  }
  const auto cats = rows(page.dom, "data-category");
  CHECK(cats.size() == size_t(kNumCategories));
  for (auto& [name, cells] : cats) {
    REQUIRE(cells.size() == 3);
    CHECK_MESSAGE(cells[2] == cells[1] - cells[0], name);
  }
  CHECK(cats.at("Input")[2] == 32 * mlp::kIn * 4);  // 32 more rows of float32 inputs (targets: 512 B each)
}

TEST_CASE("browser: a page of 100,000 events opens without errors") {
  IsolatedAllocator fresh(kMeta);
  record_history(true, 200000);
  std::vector<Block*> live;
  for (int i = 0; i < 51000; ++i) {  // a sawtooth: 500 allocations up, 500 more and 1000 frees down
    MemoryScope owner(Category::Activation, "layer" + std::to_string(i % 100));
    live.push_back(memory::allocate(kMeta, size_t(512 * (1 + i % 37)), Category::Activation));
    for (int k = 0; k < 2 && i % 1000 >= 500 && !live.empty(); ++k) {
      memory::release(live.back());
      live.pop_back();
    }
  }
  const std::string path = temp_path("large.html");
  memory::write_timeline(path, kMeta, "100k events");
  const size_t events = memory_history().size();
  record_history(false);
  for (Block* b : live) memory::release(b);
  CHECK(events > 100000);
  const browser::Page page = browser::open(path, "#selftest=click:peak");
  MESSAGE(events << " events; the page is " << timeline_page::read_file(path).size() / 1024 << " KiB");
  std::remove(path.c_str());
  expect_clean(page, true);
  CHECK(bytes_of(page.dom, "data-role=\"owner-total\"") == bytes_of(page.dom, "data-role=\"ledger\""));
}

TEST_CASE("browser: the segment maps at the peak and at the out-of-memory error, with the forensics") {
  using layout_check::Blocks;
  constexpr int64_t MiB = layout_check::MiB;
  IsolatedAllocator fresh(kMeta, 24 * MiB);
  record_history(true, 1000);
  Blocks b;
  auto owned = [&](int64_t bytes, const char* owner) {
    MemoryScope scope(Category::Activation, owner);
    return b.get(bytes);
  };
  // One 20 MiB large segment: a 4 | b 2 | c 4 | d 2 | e 4 | f 4 MiB; a, c and e freed: three 4 MiB holes.
  Block* a = owned(4 * MiB, "a");
  owned(2 * MiB, "b");
  Block* c = owned(4 * MiB, "c");
  owned(2 * MiB, "d");
  Block* e = owned(4 * MiB, "e");
  owned(4 * MiB, "f");
  owned(512, "s");  // a small segment of 2 MiB: 22 MiB reserved
  b.put(a), b.put(c), b.put(e);
  CHECK_THROWS_AS(owned(10 * MiB, "big"), OutOfMemoryError);
  const std::string path = temp_path("segments.html");
  memory::write_timeline(path, kMeta, "three holes");
  record_history(false);
  const browser::Page page = browser::open(path);
  std::remove(path.c_str());
  expect_clean(page, false);
  const size_t peak = page.dom.find("data-when=\"peak\""), oom = page.dom.find("data-when=\"oom\"");
  REQUIRE(peak != std::string::npos);
  REQUIRE(oom != std::string::npos);
  REQUIRE(peak < oom);
  const std::string at_peak = page.dom.substr(peak, oom - peak), at_oom = page.dom.substr(oom);
  // At the peak every byte of the large segment is live; the small one holds 512 B.
  CHECK(bytes_of(at_peak, "data-role=\"largest-hole\" data-pool=\"large\"") == 0);
  CHECK(bytes_of(at_peak, "data-role=\"free-bytes\" data-pool=\"small\"") == 2 * MiB - 512);
  // At the error: three holes of 4 MiB, the largest 4 MiB, pinned by b and d.
  CHECK(bytes_of(at_oom, "data-role=\"free-bytes\" data-pool=\"large\"") == 12 * MiB);
  CHECK(bytes_of(at_oom, "data-role=\"largest-hole\" data-pool=\"large\"") == 4 * MiB);
  const auto bin = browser::attributes(at_oom, "data-role=\"hole-bin\" data-pool=\"large\"");
  CHECK(bin.at("data-from") == std::to_string(4 * MiB));
  CHECK(bin.at("data-bytes") == std::to_string(12 * MiB));
  const std::string reason = browser::text_between(at_oom, "data-role=\"oom-reason\"", "</p>");
  CHECK_MESSAGE(
      reason.find("12.00 MiB is free in the large pool, but in holes of at most 4.00 MiB") != std::string::npos,
      reason);
  std::vector<std::pair<std::string, int64_t>> pinning;
  const std::regex li(R"re(<li data-role="pinning" data-owner="([^"]*)" data-bytes="(\d+)")re");
  for (std::sregex_iterator it(at_oom.begin(), at_oom.end(), li), end; it != end; ++it)
    pinning.emplace_back((*it)[1], std::stoll((*it)[2]));
  CHECK(pinning == std::vector<std::pair<std::string, int64_t>>{{"b", 2 * MiB}, {"d", 2 * MiB}});
}
