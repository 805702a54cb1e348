// read_recording: a snapshot written by dump_snapshot, read back and checked field by field, so that
// a truncated, hand-edited or foreign file is refused in one line instead of drawn with wrong numbers.
// Fields the reader does not know are allowed (the format grows by adding fields); missing ones,
// wrong types, negative sizes, unknown names and events out of order are not.
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include <memgrad/core/error.h>
#include <memgrad/core/memory/timeline_impl.h>

namespace mg::memory::detail {

namespace {

using nlohmann::json;
constexpr int kNumEventKinds = int(MemoryEventKind::Fetch) + 1;

// Reads fields of one file; every failure is an IOError "<file>: <where>: <what>".
struct Reader {
  std::string file;

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw IOError(file + ": " + (where.empty() ? "" : where + ": ") + what);
  }
  const json& field(const json& j, const char* key, const std::string& where) const {
    if (!j.is_object()) fail(where, "expected an object, found " + std::string(j.type_name()));
    auto it = j.find(key);
    if (it == j.end()) fail(where, std::string("missing \"") + key + "\"");
    return *it;
  }
  int64_t integer(const json& j, const char* key, const std::string& where) const {
    const json& v = field(j, key, where);
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
      fail(where, std::string(key) + " is " + v.dump() + ", more than 2^63 - 1");
    if (!v.is_number_integer()) fail(where, std::string(key) + " is " + v.dump() + ", expected an integer");
    return v.get<int64_t>();
  }
  int64_t size(const json& j, const char* key, const std::string& where) const {  // bytes, times: never negative
    const int64_t v = integer(j, key, where);
    if (v < 0) fail(where, std::string(key) + " is " + std::to_string(v) + ", expected a size >= 0");
    return v;
  }
  uint64_t address(const json& j, const std::string& where) const {
    const json& v = field(j, "address", where);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(where, "address is " + v.dump() + ", expected an integer >= 0");
    return v.get<uint64_t>();
  }
  std::string text(const json& j, const char* key, const std::string& where) const {
    const json& v = field(j, key, where);
    if (!v.is_string()) fail(where, std::string(key) + " is " + v.dump() + ", expected a string");
    return v.get<std::string>();
  }
  Category category(const std::string& name, const std::string& where) const {
    for (int c = 0; c < kNumCategories; ++c)
      if (name == category_name(Category(c))) return Category(c);
    fail(where, "unknown category \"" + name + "\"");
  }
  Category category(const json& j, const char* key, const std::string& where) const {
    return category(text(j, key, where), where);
  }
  CategoryBytes categories(const json& j, const char* key, const std::string& where) const {
    const json& v = field(j, key, where);
    if (!v.is_object()) fail(where, std::string(key) + " is " + v.dump() + ", expected an object of categories");
    CategoryBytes r{};
    for (auto& [name, bytes] : v.items()) category(name, where + ": " + key);
    for (int c = 0; c < kNumCategories; ++c) r[size_t(c)] = size(v, category_name(Category(c)), where + ": " + key);
    return r;
  }
  bool pool(const json& j, const std::string& where) const {  // small?
    const std::string p = text(j, "pool", where);
    if (p != "small" && p != "large") fail(where, "pool is \"" + p + "\", expected \"small\" or \"large\"");
    return p == "small";
  }
  Device device(const json& j, const std::string& where) const {
    const std::string name = text(j, "device", where);
    try {
      return Device(name);
    } catch (const Error&) {
      fail(where, "unknown device \"" + name + "\"");
    }
  }
};

MemoryEventKind event_kind(const Reader& rd, const std::string& name, const std::string& where) {
  for (int k = 0; k < kNumEventKinds; ++k)
    if (name == event_kind_name(MemoryEventKind(k))) return MemoryEventKind(k);
  rd.fail(where, "unknown event kind \"" + name + "\"");
}

MemoryEvent read_event(const Reader& rd, const json& j, const std::string& where) {
  using K = MemoryEventKind;
  MemoryEvent e;
  e.kind = event_kind(rd, rd.text(j, "kind", where), where);
  const std::string at = where + " (" + event_kind_name(e.kind) + ")";
  e.device = rd.device(j, at);
  e.time_ns = rd.size(j, "time_ns", at);
  e.bytes = rd.size(j, "bytes", at);
  e.allocated = rd.size(j, "allocated", at);
  e.reserved = rd.size(j, "reserved", at);
  e.by_category = rd.categories(j, "by_category", at);
  int64_t sum = 0;
  for (int64_t b : e.by_category) sum += b;
  if (sum != e.allocated)
    rd.fail(at,
            "its categories sum to " + std::to_string(sum) + " bytes, its allocated is " + std::to_string(e.allocated));
  const bool ledger = e.kind == K::Alloc || e.kind == K::Free || e.kind == K::Relabel;
  if (ledger || e.kind == K::Oom) {
    e.requested = rd.size(j, "requested", at);
    e.op = rd.text(j, "op", at);
  }
  if (ledger || e.kind == K::Oom || e.kind == K::Evict || e.kind == K::Remat || e.kind == K::Offload ||
      e.kind == K::Fetch) {
    e.category = rd.category(j, "category", at);
    e.owner = rd.text(j, "owner", at);
  }
  if (e.kind == K::Relabel) {
    e.previous_category = rd.category(j, "previous_category", at);
    e.previous_owner = rd.text(j, "previous_owner", at);
  }
  if (e.kind == K::SegmentAlloc || e.kind == K::SegmentFree) e.small_pool = rd.pool(j, at);
  if (e.kind == K::Annotation) e.note = rd.text(j, "note", at);
  if (e.kind != K::Annotation && e.kind != K::Oom) e.address = rd.address(j, at);
  return e;
}

// The fields of object `j` other than `known`, as a JSON object.
std::string extras(const json& j, std::initializer_list<const char*> known) {
  json r = json::object();
  for (auto& [k, v] : j.items())
    if (std::find_if(known.begin(), known.end(), [&](const char* n) { return k == n; }) == known.end()) r[k] = v;
  return r.dump();
}

SegmentInfo read_segment(const Reader& rd, const json& j, const std::string& where) {
  SegmentInfo s;
  s.address = rd.address(j, where);
  s.size = rd.size(j, "size", where);
  s.small_pool = rd.pool(j, where);
  const json& blocks = rd.field(j, "blocks", where);
  if (!blocks.is_array()) rd.fail(where, "blocks is not an array");
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string at = where + " block " + std::to_string(i);
    const json& jb = blocks[i];
    BlockInfo b;
    b.address = rd.address(jb, at);
    b.size = rd.size(jb, "size", at);
    const std::string state = rd.text(jb, "state", at);
    if (state != "active" && state != "free" && state != "pending")
      rd.fail(at, "state is \"" + state + "\", expected active, free or pending");
    b.in_use = state != "free";
    if (state == "active") {
      b.allocated = rd.size(jb, "allocated", at);
      b.requested = rd.size(jb, "requested", at);
      b.category = rd.category(jb, "category", at);
      b.owner = rd.text(jb, "owner", at);
      b.op = rd.text(jb, "op", at);
      if (b.allocated == 0) rd.fail(at, "an active block of 0 bytes");
    }
    s.blocks.push_back(std::move(b));
  }
  return s;
}

// The layout part of device entry `j` (limit, segments and their blocks) into `r`.
void read_layout(const Reader& rd, const json& j, const std::string& where, Recording& r) {
  r.limit = rd.size(rd.field(j, "stats", where), "limit", where + ": stats");
  const json& segments = rd.field(j, "segments", where);
  if (!segments.is_array()) rd.fail(where, "segments is not an array");
  for (size_t s = 0; s < segments.size(); ++s) {
    r.segments.push_back(read_segment(rd, segments[s], where + " segment " + std::to_string(s)));
    r.segment_extras.push_back(extras(segments[s], {"address", "serial", "size", "pool", "blocks"}));
  }
  r.device_extras = extras(j, {"device", "stats", "segments"});
}

json parse(const Reader& rd, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) rd.fail("", "cannot open it");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) rd.fail("", "empty, not a memgrad memory snapshot");
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    if (e.byte >= text.size())
      rd.fail("", "truncated: the JSON ends at byte " + std::to_string(text.size()) + " before it is complete");
    rd.fail("", "not a memgrad memory snapshot: not JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  }
}

}  // namespace

Recording read_recording(const std::string& path, const std::string& device) {
  const Reader rd{path};
  const json doc = parse(rd, path);
  if (!doc.is_object() || !doc.contains("format") || doc["format"] != "memgrad-memory-snapshot")
    rd.fail("", "not a memgrad memory snapshot (expected \"format\": \"memgrad-memory-snapshot\")");
  const int64_t version = rd.integer(doc, "version", "");
  if (version != kSnapshotVersion)
    rd.fail("", "a version " + std::to_string(version) + " snapshot; this memgrad reads version " +
                    std::to_string(kSnapshotVersion) + " (write it again with this memgrad)");
  const json& history = rd.field(doc, "history", "");
  const json& devices = rd.field(doc, "devices", "");
  if (!history.is_array() || !devices.is_array()) rd.fail("", "history and devices must be arrays");

  Recording r;
  r.source = path;
  if (doc.contains("title")) r.title = rd.text(doc, "title", "");
  std::vector<MemoryEvent> events;
  std::map<std::string, int64_t> allocs;  // per device
  for (size_t i = 0; i < history.size(); ++i) {
    events.push_back(read_event(rd, history[i], "event " + std::to_string(i)));
    const MemoryEvent& e = events.back();
    if (i > 0 && e.time_ns < events[i - 1].time_ns)
      rd.fail("event " + std::to_string(i), "out of order: at " + std::to_string(e.time_ns) + " ns, before event " +
                                                std::to_string(i - 1) + " at " + std::to_string(events[i - 1].time_ns) +
                                                " ns");
    allocs[e.device.str()] += e.kind == MemoryEventKind::Alloc;
  }
  if (allocs.empty()) rd.fail("", "no history (snapshots to draw are taken while mg::record_history is on)");
  std::string name = device;
  if (name.empty())
    for (auto& [d, n] : allocs)
      if (name.empty() || n > allocs[name]) name = d;
  if (!allocs.count(name)) {
    std::string recorded;
    for (auto& [d, n] : allocs) recorded += (recorded.empty() ? "" : ", ") + d;
    rd.fail("", "no history of device " + name + " (recorded: " + recorded + ")");
  }
  for (size_t i = 0; i < events.size(); ++i)
    if (events[i].device.str() == name) r.events.push_back(std::move(events[i])), r.index.push_back(i);
  r.device = r.events.front().device;
  size_t found = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::string where = "devices[" + std::to_string(i) + "]";
    if (rd.device(devices[i], where) == r.device && !found++) read_layout(rd, devices[i], where, r);
  }
  if (found != 1)
    rd.fail("", "device " + name + (found ? " has " + std::to_string(found) + " entries" : " has no entry") +
                    " in \"devices\"");
  return r;
}

Recording current_recording(const Device& d, const std::string& title) {
  Recording r;
  r.title = title;
  r.device = d;
  read_layout(Reader{"write_timeline"}, device_json(d), d.str(), r);
  std::vector<MemoryEvent> all = memory_history();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].device == d) r.events.push_back(std::move(all[i])), r.index.push_back(i);
  return r;
}

}  // namespace mg::memory::detail
