// read_recording: a snapshot written by dump_snapshot, read back and checked field by field, so that
// a truncated, hand-edited or foreign file is refused in one line instead of drawn with wrong numbers.
// Fields the reader does not know are allowed (the format grows by adding fields); missing ones,
// wrong types, negative sizes, unknown names and events out of order are not.
#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include <memgrad/core/error.h>
#include <memgrad/core/files.h>
#include <memgrad/report/timeline_impl.h>

namespace mg::memory::detail {

namespace {

using nlohmann::json;
constexpr int kNumEventKinds = int(MemoryEventKind::SegmentUnmap) + 1;

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
  uint64_t address(const json& j, const std::string& where, const char* key = "address") const {
    const json& v = field(j, key, where);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(where, std::string(key) + " is " + v.dump() + ", expected an integer >= 0");
    return v.get<uint64_t>();
  }
  bool boolean(const json& j, const char* key, const std::string& where) const {
    const json& v = field(j, key, where);
    if (!v.is_boolean()) fail(where, std::string(key) + " is " + v.dump() + ", expected true or false");
    return v.get<bool>();
  }
  const json& array(const json& j, const char* key, const std::string& where) const {
    const json& v = field(j, key, where);
    if (!v.is_array()) fail(where, std::string(key) + " is " + v.dump() + ", expected an array");
    return v;
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

// Fragmentation forensics (fragmentation_json), checked: sizes never negative, each pool's holes by
// size adding up to its free bytes, the pools in order (small, large).
Fragmentation read_fragmentation(const Reader& rd, const json& j, const std::string& where) {
  Fragmentation f;
  f.request = rd.size(j, "request", where);
  f.small_request = rd.pool(j, where);
  f.limit = rd.size(j, "limit", where);
  f.allocated = rd.size(j, "allocated", where);
  f.reserved = rd.size(j, "reserved", where);
  f.cached = rd.size(j, "cached", where);
  f.caching = rd.boolean(j, "caching", where);
  f.expandable = rd.boolean(j, "expandable", where);
  const json& pools = rd.array(j, "pools", where);
  if (pools.size() != 2) rd.fail(where, "expected 2 pools (small, large), found " + std::to_string(pools.size()));
  for (size_t k = 0; k < 2; ++k) {
    const std::string at = where + ": pools[" + std::to_string(k) + "]";
    PoolFragmentation& p = f.pools[k];
    p.small_pool = rd.pool(pools[k], at);
    if (p.small_pool != (k == 0)) rd.fail(at, "expected the small pool first, then the large one");
    p.segments = rd.size(pools[k], "segments", at);
    p.reserved = rd.size(pools[k], "reserved", at);
    p.free_bytes = rd.size(pools[k], "free_bytes", at);
    p.largest_free = rd.size(pools[k], "largest_free", at);
    p.releasable = rd.size(pools[k], "releasable", at);
    int64_t sum = 0;
    for (const json& h : rd.array(pools[k], "by_hole_size", at)) {
      HoleSizeBin b{rd.size(h, "from", at), rd.size(h, "to", at), rd.size(h, "holes", at), rd.size(h, "bytes", at)};
      if (b.to <= b.from || b.bytes < b.holes * b.from || (b.holes == 0) != (b.bytes == 0))
        rd.fail(at, "a hole-size bin " + h.dump() + " that cannot be: " + std::to_string(b.holes) + " holes in [" +
                        std::to_string(b.from) + ", " + std::to_string(b.to) + ")");
      sum += b.bytes;
      p.by_hole_size.push_back(b);
    }
    if (sum != p.free_bytes || p.largest_free > p.free_bytes)
      rd.fail(at, "its holes by size add up to " + std::to_string(sum) + " bytes, its free_bytes is " +
                      std::to_string(p.free_bytes) + " (largest " + std::to_string(p.largest_free) + ")");
  }
  f.other_streams = rd.size(j, "other_streams", where);
  f.fits_in_cache = rd.boolean(j, "fits_in_cache", where);
  f.new_memory = rd.size(j, "new_memory", where);
  for (const json& h : rd.array(j, "split_holes", where)) {
    const std::string at = where + ": split_holes";
    SplitHole s;
    s.segment = rd.address(h, at, "segment");
    s.address = rd.address(h, at);
    s.size = rd.size(h, "size", at);
    s.free_bytes = rd.size(h, "free_bytes", at);
    s.largest_hole = rd.size(h, "largest_hole", at);
    int64_t pinned = 0;
    for (const json& b : rd.array(h, "pinning", at)) {
      BlockRef r;
      r.address = rd.address(b, at);
      r.size = rd.size(b, "size", at);
      r.category = rd.category(b, "category", at);
      r.owner = rd.text(b, "owner", at);
      r.op = rd.text(b, "op", at);
      pinned += r.size;
      s.pinning.push_back(std::move(r));
    }
    if (s.free_bytes + pinned != s.size || s.largest_hole > s.free_bytes || s.pinning.empty())
      rd.fail(at, "a split hole of " + std::to_string(s.size) + " bytes whose holes (" + std::to_string(s.free_bytes) +
                      ") and pinning blocks (" + std::to_string(pinned) + ") do not make it up");
    f.split_holes.push_back(std::move(s));
  }
  f.fits_after_empty_cache = rd.boolean(j, "fits_after_empty_cache", where);
  f.fits_with_other_pool = rd.boolean(j, "fits_with_other_pool", where);
  f.fits_expandable = rd.boolean(j, "fits_expandable", where);
  f.reason = rd.text(j, "reason", where);
  return f;
}

MemoryEventKind event_kind(const Reader& rd, const std::string& name, const std::string& where) {
  for (int k = 0; k < kNumEventKinds; ++k)
    if (name == event_kind_name(MemoryEventKind(k))) return MemoryEventKind(k);
  rd.fail(where, "unknown event kind \"" + name + "\"");
}

MemoryEvent read_event(const Reader& rd, const json& j, const std::string& where, int64_t version) {
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
  const bool segment = e.kind == K::SegmentAlloc || e.kind == K::SegmentFree,
             map = e.kind == K::SegmentMap || e.kind == K::SegmentUnmap;
  if (segment || map) e.small_pool = rd.pool(j, at);
  if (version >= 3) {  // what version 3 added
    if (segment || map) e.expandable = rd.boolean(j, "expandable", at);
    if (map && !e.expandable) rd.fail(at, "a map event of a segment that is not expandable");
    if (e.kind == K::Alloc || e.kind == K::Free) {
      e.carved = rd.size(j, "carved", at);
      if (e.carved < e.bytes) rd.fail(at, "carved is " + std::to_string(e.carved) + ", less than its bytes");
    }
    if (e.kind == K::Oom && j.contains("fragmentation"))
      e.fragmentation = std::make_shared<const Fragmentation>(read_fragmentation(rd, j["fragmentation"], at));
  } else if (map) {
    rd.fail(at, "a map event in a version 2 snapshot");
  }
  if (e.kind == K::Annotation) e.note = rd.text(j, "note", at);
  if (e.kind != K::Annotation && e.kind != K::Oom) e.address = rd.address(j, at);
  return e;
}

// The fields of object `j` other than `known`, as a JSON object.
std::string extras(const json& j, std::initializer_list<const char*> known) {
  json r = json::object();
  for (auto& item : j.items())
    if (std::none_of(known.begin(), known.end(), [&](const char* n) { return item.key() == n; }))
      r[item.key()] = item.value();
  return r.dump();
}

SegmentInfo read_segment(const Reader& rd, const json& j, const std::string& where, int64_t version) {
  SegmentInfo s;
  s.address = rd.address(j, where);
  s.size = rd.size(j, "size", where);
  s.small_pool = rd.pool(j, where);
  s.extent = s.virtual_size = s.size;
  if (version >= 3) {
    s.expandable = rd.boolean(j, "expandable", where);
    s.extent = rd.size(j, "extent", where);
    s.virtual_size = rd.size(j, "virtual_size", where);
    if (!s.expandable && (s.extent != s.size || s.virtual_size != s.size))
      rd.fail(where, "a fixed segment whose extent or virtual_size is not its size");
    if (s.expandable && (s.size > s.extent || s.extent > s.virtual_size))
      rd.fail(where, "an expandable segment with size <= extent <= virtual_size untrue");
  }
  const json& blocks = rd.field(j, "blocks", where);
  if (!blocks.is_array()) rd.fail(where, "blocks is not an array");
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string at = where + " block " + std::to_string(i);
    const json& jb = blocks[i];
    BlockInfo b;
    b.address = rd.address(jb, at);
    b.size = rd.size(jb, "size", at);
    const std::string state = rd.text(jb, "state", at);
    if (state != "active" && state != "free" && state != "pending" && (state != "unmapped" || !s.expandable))
      rd.fail(at, "state is \"" + state + "\", expected active, free, pending or (in an expandable segment) unmapped");
    b.in_use = state == "active" || state == "pending";
    b.mapped = state != "unmapped";
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
void read_layout(const Reader& rd, const json& j, const std::string& where, int64_t version, Recording& r) {
  r.limit = rd.size(rd.field(j, "stats", where), "limit", where + ": stats");
  const json& segments = rd.field(j, "segments", where);
  if (!segments.is_array()) rd.fail(where, "segments is not an array");
  for (size_t s = 0; s < segments.size(); ++s) {
    r.segments.push_back(read_segment(rd, segments[s], where + " segment " + std::to_string(s), version));
    r.segment_extras.push_back(
        extras(segments[s], {"address", "serial", "size", "pool", "expandable", "extent", "virtual_size", "blocks"}));
  }
  if (version >= 3)
    r.fragmentation = std::make_shared<const Fragmentation>(
        read_fragmentation(rd, rd.field(j, "fragmentation", where), where + ": fragmentation"));
  r.device_extras = extras(j, {"device", "stats", "segments", "fragmentation"});
}

json parse(const Reader& rd, const std::string& path) {
  const std::string text = InputFile(path, "").read_all();  // a regular file only: a FIFO would block
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
  if (version != kSnapshotVersion && version != 2)
    rd.fail("", "a version " + std::to_string(version) + " snapshot; this memgrad reads versions 2 and " +
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
    events.push_back(read_event(rd, history[i], "event " + std::to_string(i), version));
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
    if (rd.device(devices[i], where) == r.device && !found++) read_layout(rd, devices[i], where, version, r);
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
  read_layout(Reader{"write_timeline"}, device_json(d), d.str(), kSnapshotVersion, r);
  std::vector<MemoryEvent> all = memory_history();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].device == d) r.events.push_back(std::move(all[i])), r.index.push_back(i);
  return r;
}

}  // namespace mg::memory::detail
