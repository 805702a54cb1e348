// timeline_data: one recording as the JSON the page draws, checked on the way.
//
// The allocator's layout after the last event is known exactly (every live block with its owner
// and category, every segment), and the history says how each event changed it. Undoing the events
// from the last to the first gives the layout before the first one (blocks allocated before
// recording started included); doing them again forwards gives every block's life. Each event's
// recorded totals (allocated and each category's bytes, reserved) must equal the blocks and
// segments live at that moment, so the page's numbers are the ledger's: a history that does not add
// up (edited, truncated in the middle, or two allocators of one device interleaved) is refused.
//
// The JSON (read by timeline.js; `x[]` is an array, one entry per point, block, ... ):
//   title, source, device, limit, events (the device's event count), peak (a point)
//   points: ev[] (the event's place in the history), and t[] (ns), allocated[], reserved[],
//           cat[8][] (bytes per category) as differences from the previous point
//   strings[]: owners, ops and notes, referred to by index
//   blocks: start[], end[] (points; live in [start, end), -1: before the recording, points: to
//           the end), bytes[], carved[] (its size in the segment), requested[], op[], flags[]
//           (kFlag*), seg[], offset[] (bytes into the segment), alloc_ev[], free_ev[] (-1: outside
//           the recording), change[] (its first entry in changes)
//   changes: block[], point[], cat[], owner[]: each block's category and owner from a point on
//   segments: start[], end[], start_ev[], end_ev[] (history events: made by start_ev, gone from
//             end_ev on; -1: before the recording, and live at the end), size[] (an expandable
//             one's address range), small[], expandable[], address[] (hex), extra[] (the snapshot's
//             fields the page does not interpret, for segments live at the end), device_extra
//   maps: seg[], ev[], offset[], bytes[], on[] (1 mapped, 0 unmapped): the pages of expandable
//         segments, from history event ev on (-1: mapped before the recording)
//   marks: pos[] (the point it comes before), ev[] (its history event), kind[] (step, phase, note,
//          oom, evict, remat, offload, fetch), text[] (a string), bytes[], forensics[] (an oom's:
//          its index in forensics, else -1)
//   forensics[]: the fragmentation forensics of the OOMs (fragmentation_json); fragmentation: the
//                forensics at the end (null from a version 2 snapshot)
#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>
#include <unordered_map>

#include <memgrad/core/error.h>
#include <memgrad/report/timeline_impl.h>

namespace mg::memory::detail {

namespace {

// Block flags (timeline.js has the same list).
enum : int {
  kFlagSaved = 1,       // an Activation (saved for backward) at some point of its life
  kFlagRecomputed = 2,  // made by a recompute (its owner path has "recompute": a checkpoint segment, budget scratch)
  kFlagEvicted = 4,     // freed by a memory budget's eviction
  kFlagOffloaded = 8,   // freed after its bytes went to the host pool
  kFlagRemat = 16,      // made again by a memory budget's rematerialization
  kFlagFetched = 32,    // brought back from the host pool
};

using K = MemoryEventKind;

struct LiveBlock {
  int64_t bytes = 0, carved = 0, requested = 0;
  Category category = Category::Other;
  std::string owner, op;
};

// Disjoint address ranges [begin, end), merged where they touch: an expandable segment's mapped pages.
struct Ranges {
  std::map<uint64_t, uint64_t> r;  // begin -> end
  bool covers(uint64_t b, uint64_t e) const {
    auto it = r.upper_bound(b);
    return it != r.begin() && std::prev(it)->second >= e;
  }
  bool add(uint64_t b, uint64_t e) {  // false when it overlaps what is there
    auto next = r.lower_bound(b);
    if ((next != r.end() && next->first < e) || (next != r.begin() && std::prev(next)->second > b)) return false;
    if (next != r.end() && next->first == e) e = next->second, r.erase(next);
    if (auto prev = r.lower_bound(b); prev != r.begin() && std::prev(prev)->second == b)
      std::prev(prev)->second = e;
    else
      r[b] = e;
    return true;
  }
  bool remove(uint64_t b, uint64_t e) {  // false unless it lies in one range
    if (!covers(b, e)) return false;
    auto it = std::prev(r.upper_bound(b));
    const uint64_t begin = it->first, end = it->second;
    r.erase(it);
    if (begin < b) r[begin] = b;
    if (e < end) r[e] = end;
    return true;
  }
  int64_t bytes() const {
    int64_t n = 0;
    for (auto& [b, e] : r) n += int64_t(e - b);
    return n;
  }
};

struct LiveSegment {
  int64_t size = 0;  // an expandable one's address range
  bool small = false, expandable = false;
  Ranges mapped;  // expandable: its pages mapped now
  int64_t reserved() const { return expandable ? mapped.bytes() : size; }
};

// The blocks and segments live at one moment, with their totals.
struct Layout {
  std::unordered_map<uint64_t, LiveBlock> blocks;
  std::map<uint64_t, LiveSegment> segments;  // by address
  CategoryBytes by_category{};
  int64_t reserved = 0;

  // The segment that holds address a, or null.
  LiveSegment* segment_at(uint64_t a) {
    auto it = segments.upper_bound(a);
    if (it == segments.begin()) return nullptr;
    --it;
    return a < it->first + uint64_t(it->second.size) ? &it->second : nullptr;
  }

  void add(uint64_t a, const LiveBlock& b, int sign) {
    by_category[size_t(b.category)] += sign * b.bytes;
    if (sign > 0)
      blocks[a] = b;
    else
      blocks.erase(a);
  }
};

// JSON from nlohmann that is safe inside <script>: '<', '>' and '&' (only ever inside strings) escaped.
std::string script_safe(const nlohmann::json& j) {
  std::string r;
  for (char ch : j.dump()) {
    if (ch == '<' || ch == '>' || ch == '&') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      r += buf;
    } else {
      r += ch;
    }
  }
  return r;
}

std::string hex(uint64_t a) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, a, 16);
  return "0x" + std::string(buf, r.ptr);
}

struct Checker {
  const Recording& r;
  // Event i (before the first event: i = size).
  [[noreturn]] void fail(size_t i, const std::string& what) const {
    if (i >= r.events.size()) throw ValueError("the layout before the first event: " + what);
    const MemoryEvent& e = r.events[i];
    std::string where = "event " + std::to_string(r.index[i]) + " (" + event_kind_name(e.kind);
    if (e.kind != K::Annotation && e.kind != K::Oom) where += " at " + hex(e.address);
    throw ValueError(where + "): " + what);
  }
  // Event i records `recorded` bytes of `what`; the blocks (or segments) live then add up to `live`.
  void same(size_t i, const std::string& what, int64_t live, int64_t recorded) const {
    if (live != recorded)
      fail(i, "it records " + std::to_string(recorded) + " " + what +
                  " bytes, the blocks and segments live then add up to " + std::to_string(live));
  }
};

// The layout after the last event, from the allocator's segments.
Layout final_layout(const Recording& r) {
  Layout l;
  for (const SegmentInfo& s : r.segments) {
    const std::string at = "the layout at the end: segment " + hex(s.address);
    LiveSegment seg{s.expandable ? s.virtual_size : s.size, s.small_pool, s.expandable, {}};
    uint64_t next = s.address;
    for (const BlockInfo& b : s.blocks) {
      if (b.address != next || b.size <= 0 || b.allocated > b.size)
        throw ValueError(at + ": its blocks do not tile it (block at " + hex(b.address) + ")");
      next += uint64_t(b.size);
      if (b.mapped && s.expandable) seg.mapped.add(b.address, b.address + uint64_t(b.size));
      if (b.in_use && b.allocated > 0)
        l.add(b.address, {b.allocated, b.size, b.requested, b.category, b.owner, b.op}, +1);
    }
    if (next != s.address + uint64_t(s.extent)) throw ValueError(at + ": its blocks do not cover its extent");
    if (seg.reserved() != s.size) throw ValueError(at + ": its mapped blocks do not add up to its size");
    l.reserved += s.size;
    if (!l.segments.emplace(s.address, std::move(seg)).second) throw ValueError(at + ": listed twice");
  }
  return l;
}

// Undoes event i: `l` goes from the layout after it to the layout before it.
void undo(const Checker& c, size_t i, Layout& l) {
  const MemoryEvent& e = c.r.events[i];
  auto live = l.blocks.find(e.address);
  const bool is_live = live != l.blocks.end();
  auto check_block = [&] {
    if (!is_live) c.fail(i, "no live block there afterwards");
    const LiveBlock& b = live->second;
    if (b.bytes != e.bytes || b.category != e.category || b.owner != e.owner)
      c.fail(i, "it says " + std::to_string(e.bytes) + " B of " + category_name(e.category) + " for \"" + e.owner +
                    "\", the events after it (and the layout at the end) " + std::to_string(b.bytes) + " B of " +
                    category_name(b.category) + " for \"" + b.owner + "\"");
  };
  switch (e.kind) {
    case K::Alloc:
      check_block();
      l.add(e.address, live->second, -1);
      break;
    case K::Free:
      if (is_live) c.fail(i, "the address is still live after the free");
      l.add(e.address, {e.bytes, std::max(e.carved, e.bytes), e.requested, e.category, e.owner, e.op}, +1);
      break;
    case K::Relabel: {
      check_block();
      LiveBlock b = live->second;
      l.add(e.address, b, -1);
      b.category = e.previous_category;
      b.owner = e.previous_owner;
      l.add(e.address, b, +1);
      break;
    }
    case K::SegmentAlloc: {
      auto s = l.segments.find(e.address);
      if (s == l.segments.end() || s->second.size != e.bytes || s->second.expandable != e.expandable)
        c.fail(i, "no such segment afterwards");
      if (s->second.mapped.bytes()) c.fail(i, "pages of the segment are mapped before it is made");
      l.reserved -= s->second.reserved();
      l.segments.erase(s);
      break;
    }
    case K::SegmentFree:
      if (!l.segments.emplace(e.address, LiveSegment{e.bytes, e.small_pool, e.expandable, {}}).second)
        c.fail(i, "the segment is still there afterwards");
      l.reserved += e.expandable ? 0 : e.bytes;  // an expandable one unmapped all its pages first
      break;
    case K::SegmentMap:
    case K::SegmentUnmap: {
      LiveSegment* s = l.segment_at(e.address);
      const uint64_t end = e.address + uint64_t(e.bytes);
      const bool ok = s && s->expandable &&
                      (e.kind == K::SegmentMap ? s->mapped.remove(e.address, end) : s->mapped.add(e.address, end));
      if (!ok)
        c.fail(i, e.kind == K::SegmentMap ? "the pages are not mapped afterwards" : "the pages are mapped afterwards");
      l.reserved += e.kind == K::SegmentMap ? -e.bytes : e.bytes;
      break;
    }
    default:
      break;
  }
}

// The layout before the first event, checking every event's totals on the way back.
Layout initial_layout(const Recording& r) {
  const Checker c{r};
  Layout l = final_layout(r);
  for (size_t i = r.events.size(); i-- > 0;) {
    const MemoryEvent& e = r.events[i];
    for (int k = 0; k < kNumCategories; ++k)
      c.same(i, category_name(Category(k)), l.by_category[size_t(k)], e.by_category[size_t(k)]);
    c.same(i, "reserved", l.reserved, e.reserved);
    undo(c, i, l);
  }
  return l;
}

// ---- JSON output

struct Json {
  std::string s;
  void sep() {
    if (!s.empty() && s.back() != '{' && s.back() != '[' && s.back() != ':') s += ',';
  }
  void num(int64_t v) {
    sep();
    char buf[24];
    s.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  }
  void str(const std::string& t) {  // safe inside <script> too: no '<', '>' or '&' survives
    sep();
    s += '"';
    for (unsigned char ch : t) {
      if (ch == '"' || ch == '\\') {
        s += '\\';
        s += char(ch);
      } else if (ch < 0x20 || ch == '<' || ch == '>' || ch == '&') {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", ch);
        s += buf;
      } else {
        s += char(ch);
      }
    }
    s += '"';
  }
  void key(const char* k) {
    str(k);
    s += ':';
  }
  void open(char c) {
    sep();
    s += c;
  }
  void close(char c) { s += c; }
  void value(const std::string& json) {  // already JSON
    sep();
    s += json;
  }
  // An array; `deltas`: each entry as its difference from the previous one (the page sums them up).
  template <class T>
  void list(const std::vector<T>& v, bool deltas = false) {
    open('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, std::string>)
        str(v[i]);
      else
        num(int64_t(v[i]) - (deltas && i ? int64_t(v[i - 1]) : 0));
    }
    close(']');
  }
  template <class T>
  void field(const char* k, const std::vector<T>& v, bool deltas = false) {
    key(k);
    list(v, deltas);
  }
};

// The page's arrays, filled forwards from the initial layout.
struct Build {
  explicit Build(const Recording& recording) : r(recording) {}
  const Recording& r;
  std::vector<int64_t> ev, t, allocated, reserved;
  std::vector<std::vector<int64_t>> cat = std::vector<std::vector<int64_t>>(kNumCategories);
  std::vector<std::string> strings;
  std::unordered_map<std::string, int> string_ids;
  struct Block {
    int64_t start = -1, end = -2, bytes = 0, carved = 0, requested = 0;  // end -2: live at the end
    int op = 0, flags = 0, seg = 0;
    int64_t offset = 0, alloc_ev = -1, free_ev = -1;
    std::vector<std::array<int64_t, 3>> changes;  // point, category, owner
  };
  std::vector<Block> blocks;
  std::map<uint64_t, int> live;  // address -> block
  struct Segment {
    int64_t start, end = -2, start_ev, end_ev = -1, size;
    bool small, expandable;
    uint64_t address;
    Ranges mapped;  // expandable: its pages mapped now
  };
  std::vector<Segment> segments;
  std::map<uint64_t, int> live_segments;  // address -> segment
  std::vector<int64_t> map_seg, map_ev, map_offset, map_bytes, map_on;
  std::vector<int64_t> mark_pos, mark_ev, mark_bytes, mark_forensics;
  std::vector<std::string> mark_kind;
  std::vector<int> mark_text;
  std::vector<std::string> forensics;  // as JSON

  int string_id(const std::string& s) {
    auto [it, added] = string_ids.emplace(s, int(strings.size()));
    if (added) strings.push_back(s);
    return it->second;
  }
  int64_t point() const { return int64_t(ev.size()); }  // the next point
  void mark(const char* kind, const std::string& text, int64_t bytes, int64_t ev, int64_t forensic = -1) {
    mark_pos.push_back(point()), mark_kind.emplace_back(kind), mark_text.push_back(string_id(text));
    mark_bytes.push_back(bytes), mark_ev.push_back(ev), mark_forensics.push_back(forensic);
  }
  // Segment `s` at `address`, made by history event `ev` (-1: before the recording).
  void add_segment(int64_t start, int64_t ev, uint64_t address, const LiveSegment& s) {
    live_segments[address] = int(segments.size());
    segments.push_back({start, -2, ev, -1, s.size, s.small, s.expandable, address, {}});
    for (auto& [b, e] : s.mapped.r) map(ev, address, b, e, true);
  }
  void map(int64_t ev, uint64_t seg_address, uint64_t b, uint64_t e, bool on) {
    const int k = live_segments.at(seg_address);
    map_seg.push_back(k), map_ev.push_back(ev), map_offset.push_back(int64_t(b - seg_address));
    map_bytes.push_back(int64_t(e - b)), map_on.push_back(on);
    if (on) segments[size_t(k)].mapped.add(b, e);
  }
  void open_block(const Checker& c, size_t i, uint64_t a, const LiveBlock& b, int64_t start, int64_t alloc_ev);
  void event(const Checker& c, size_t i);
  std::string json(const Layout& first);
};

int64_t flags_of(const std::string& owner, Category c) {
  const std::string dotted = "." + owner + ".";
  return (c == Category::Activation ? kFlagSaved : 0) |
         (dotted.find(".recompute.") != std::string::npos ? kFlagRecomputed : 0);
}

void Build::open_block(const Checker& c, size_t i, uint64_t a, const LiveBlock& b, int64_t start, int64_t alloc_ev) {
  auto seg = live_segments.upper_bound(a);
  if (seg == live_segments.begin()) c.fail(i, "the block lies in no segment");
  --seg;
  const Segment& s = segments[size_t(seg->second)];
  const uint64_t end = a + uint64_t(b.carved);
  if (end > s.address + uint64_t(s.size)) c.fail(i, "the block lies in no segment");
  if (s.expandable && !s.mapped.covers(a, end)) c.fail(i, "the block lies in pages its segment has not mapped");
  const auto next = live.lower_bound(a);
  const bool overlaps_next = next != live.end() && next->first < end;
  const bool overlaps_previous =
      next != live.begin() && std::prev(next)->first + uint64_t(blocks[size_t(std::prev(next)->second)].carved) > a;
  if (overlaps_next || overlaps_previous) c.fail(i, "the block overlaps a live one");
  Block nb;
  nb.start = start, nb.bytes = b.bytes, nb.carved = b.carved, nb.requested = b.requested, nb.op = string_id(b.op);
  nb.flags = int(flags_of(b.owner, b.category)), nb.seg = seg->second, nb.offset = int64_t(a - s.address);
  nb.alloc_ev = alloc_ev;
  nb.changes.push_back({start, int64_t(b.category), string_id(b.owner)});
  live[a] = int(blocks.size());
  blocks.push_back(std::move(nb));
}

void Build::event(const Checker& c, size_t i) {
  const MemoryEvent& e = r.events[i];
  const int64_t p = point();
  auto block = [&]() -> Block& {  // the live block at the event's address (checked on the way back)
    auto it = live.find(e.address);
    if (it == live.end()) c.fail(i, "no live block there");
    return blocks[size_t(it->second)];
  };
  switch (e.kind) {
    case K::Alloc:
      open_block(c, i, e.address, {e.bytes, std::max(e.carved, e.bytes), e.requested, e.category, e.owner, e.op}, p,
                 int64_t(r.index[i]));
      break;
    case K::Free: {
      Block& b = block();
      b.end = p, b.free_ev = int64_t(r.index[i]);
      live.erase(e.address);
      break;
    }
    case K::Relabel: {
      Block& b = block();
      b.changes.push_back({p, int64_t(e.category), string_id(e.owner)});
      b.flags |= int(flags_of(e.owner, e.category));
      break;
    }
    case K::SegmentAlloc:
      add_segment(p, int64_t(r.index[i]), e.address, {e.bytes, e.small_pool, e.expandable, {}});
      break;
    case K::SegmentMap:
    case K::SegmentUnmap: {  // checked on the way back: the pages lie in a live expandable segment
      auto it = std::prev(live_segments.upper_bound(e.address));
      const uint64_t end = e.address + uint64_t(e.bytes);
      if (e.kind == K::SegmentUnmap) {
        auto k = live.lower_bound(e.address);  // no live block may lie in unmapped pages
        if (k != live.begin()) --k;
        for (; k != live.end() && k->first < end; ++k)
          if (k->first + uint64_t(blocks[size_t(k->second)].carved) > e.address) c.fail(i, "it unmaps a live block");
        segments[size_t(it->second)].mapped.remove(e.address, end);
      }
      map(int64_t(r.index[i]), it->first, e.address, end, e.kind == K::SegmentMap);
      break;
    }
    case K::SegmentFree: {
      auto it = live_segments.find(e.address);
      if (it == live_segments.end()) c.fail(i, "no live segment there");
      segments[size_t(it->second)].end = p, segments[size_t(it->second)].end_ev = int64_t(r.index[i]);
      live_segments.erase(it);
      break;
    }
    case K::Annotation: {
      const bool step = e.note.rfind("step ", 0) == 0,
                 phase = e.note == "forward" || e.note == "backward" || e.note == "optimizer";
      mark(step ? "step" : phase ? "phase" : "note", e.note, 0, int64_t(r.index[i]));
      break;
    }
    case K::Oom:
      if (e.fragmentation) {  // with the page's numbers of the live blocks that split the room it needed
        nlohmann::json f = fragmentation_json(*e.fragmentation), pinned = nlohmann::json::array();
        for (const SplitHole& h : e.fragmentation->split_holes)
          for (const BlockRef& b : h.pinning)
            if (auto it = live.find(b.address); it != live.end()) pinned.push_back(it->second);
        f["blocks"] = std::move(pinned);
        forensics.push_back(script_safe(f));
      }
      mark("oom",
           "out of memory: " + format_bytes(e.bytes) + " of " + category_name(e.category) +
               (e.owner.empty() ? "" : " for " + e.owner) + (e.op.empty() ? "" : " (" + e.op + ")"),
           e.bytes, int64_t(r.index[i]), e.fragmentation ? int64_t(forensics.size()) - 1 : -1);
      break;
    case K::Evict:
    case K::Offload:
    case K::Remat:
    case K::Fetch: {
      static const std::map<K, std::pair<const char*, int>> kinds = {{K::Evict, {"evict", kFlagEvicted}},
                                                                     {K::Offload, {"offload", kFlagOffloaded}},
                                                                     {K::Remat, {"remat", kFlagRemat}},
                                                                     {K::Fetch, {"fetch", kFlagFetched}}};
      const auto& [name, flag] = kinds.at(e.kind);
      block().flags |= flag;
      mark(name, e.owner, e.bytes, int64_t(r.index[i]));
      break;
    }
  }
  if (e.kind == K::Alloc || e.kind == K::Free || e.kind == K::Relabel) {
    ev.push_back(int64_t(r.index[i]));
    t.push_back(e.time_ns);
    allocated.push_back(e.allocated);
    reserved.push_back(e.reserved);
    for (int k = 0; k < kNumCategories; ++k) cat[size_t(k)].push_back(e.by_category[size_t(k)]);
  }
}

std::string Build::json(const Layout& first) {
  const int64_t n = point();
  Json j;
  j.open('{');
  j.key("title"), j.str(r.title);
  j.key("source"), j.str(r.source);
  j.key("device"), j.str(r.device.str());
  j.key("limit"), j.num(r.limit);
  j.key("events"), j.num(int64_t(r.events.size()));
  j.key("before"), j.num(std::accumulate(first.by_category.begin(), first.by_category.end(), int64_t(0)));
  j.key("peak"), j.num(n ? int64_t(std::max_element(allocated.begin(), allocated.end()) - allocated.begin()) : -1);
  j.key("points"), j.open('{');
  j.field("ev", ev, true), j.field("t", t, true), j.field("allocated", allocated, true);
  j.field("reserved", reserved, true);
  j.key("cat"), j.open('[');
  for (auto& c : cat) j.list(c, true);
  j.close(']'), j.close('}');
  j.field("strings", strings);
  std::vector<int64_t> b_[12], c_[4];  // the blocks' and the changes' columns
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    const int64_t col[] = {
        b.start,   b.end < -1 ? n : b.end, b.bytes, b.carved, b.requested, b.op, b.flags, b.seg, b.offset, b.alloc_ev,
        b.free_ev, int64_t(c_[0].size())};
    for (int k = 0; k < 12; ++k) b_[k].push_back(col[k]);
    for (auto& [p, k, o] : b.changes)
      c_[0].push_back(int64_t(i)), c_[1].push_back(p), c_[2].push_back(k), c_[3].push_back(o);
  }
  const char* b_names[] = {"start", "end", "bytes",  "carved",   "requested", "op",
                           "flags", "seg", "offset", "alloc_ev", "free_ev",   "change"};
  j.key("blocks"), j.open('{');
  for (int k = 0; k < 12; ++k) j.field(b_names[k], b_[k]);
  j.close('}');
  const char* c_names[] = {"block", "point", "cat", "owner"};
  j.key("changes"), j.open('{');
  for (int k = 0; k < 4; ++k) j.field(c_names[k], c_[k]);
  j.close('}');
  std::vector<int64_t> s_[7];
  std::vector<std::string> address;
  j.key("segments"), j.open('{');
  j.key("extra"), j.open('[');
  for (const Segment& s : segments) {
    const int64_t col[] = {s.start, s.end < -1 ? n : s.end, s.start_ev, s.end_ev, s.size, s.small, s.expandable};
    for (int k = 0; k < 7; ++k) s_[k].push_back(col[k]);
    address.push_back(hex(s.address));
    std::string extra = "{}";  // the snapshot's own fields, for the segments live at the end
    for (size_t k = 0; k < r.segments.size() && s.end < -1; ++k)
      if (r.segments[k].address == s.address) extra = r.segment_extras.at(k);
    j.value(extra);
  }
  j.close(']');
  const char* s_names[] = {"start", "end", "start_ev", "end_ev", "size", "small", "expandable"};
  for (int k = 0; k < 7; ++k) j.field(s_names[k], s_[k]);
  j.field("address", address);
  j.key("device_extra"), j.value(r.device_extras);
  j.close('}');
  j.key("maps"), j.open('{');
  j.field("seg", map_seg), j.field("ev", map_ev), j.field("offset", map_offset), j.field("bytes", map_bytes);
  j.field("on", map_on);
  j.close('}');
  j.key("marks"), j.open('{');
  j.field("pos", mark_pos), j.field("ev", mark_ev), j.field("kind", mark_kind), j.field("text", mark_text);
  j.field("bytes", mark_bytes), j.field("forensics", mark_forensics);
  j.close('}');
  j.key("forensics"), j.open('[');
  for (const std::string& f : forensics) j.value(f);
  j.close(']');
  j.key("fragmentation"), j.value(r.fragmentation ? script_safe(fragmentation_json(*r.fragmentation)) : "null");
  j.close('}');
  return j.s;
}

}  // namespace

std::string timeline_data(const Recording& r) {
  const Checker c{r};
  const Layout first = initial_layout(r);
  Build b(r);
  for (auto& [a, s] : first.segments) b.add_segment(-1, -1, a, s);
  const std::map<uint64_t, LiveBlock> before(first.blocks.begin(), first.blocks.end());  // in address order
  for (auto& [a, blk] : before) b.open_block(c, r.events.size(), a, blk, -1, -1);
  for (size_t i = 0; i < r.events.size(); ++i) b.event(c, i);
  return b.json(first);
}

}  // namespace mg::memory::detail
