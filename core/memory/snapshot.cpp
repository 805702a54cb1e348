// dump_snapshot: stats, segments, blocks and history of every device as one JSON document (its
// fields are listed in docs/memory.md; report/snapshot_read.cpp reads it back for the timeline page).
#include <string>

#include <nlohmann/json.hpp>

#include <memgrad/core/error.h>
#include <memgrad/core/files.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/memory/snapshot_impl.h>

namespace mg {

namespace {

using nlohmann::json;

json categories_json(const CategoryBytes& v) {
  json j = json::object();
  for (int c = 0; c < kNumCategories; ++c) j[category_name(Category(c))] = v[size_t(c)];
  return j;
}

json stats_json(const MemoryStats& s) {
  return json{{"allocated", s.allocated},
              {"peak_allocated", s.peak_allocated},
              {"reserved", s.reserved},
              {"peak_reserved", s.peak_reserved},
              {"active", s.active},
              {"peak_active", s.peak_active},
              {"requested", s.requested},
              {"peak_requested", s.peak_requested},
              {"by_category", categories_json(s.by_category)},
              {"peak_by_category", categories_json(s.peak_by_category)},
              {"at_peak_by_category", categories_json(s.at_peak_by_category)},
              {"at_peak_by_owner", s.at_peak_by_owner},
              {"total_allocated", s.total_allocated},
              {"total_freed", s.total_freed},
              {"num_allocs", s.num_allocs},
              {"num_frees", s.num_frees},
              {"num_segments", s.num_segments},
              {"num_segment_allocs", s.num_segment_allocs},
              {"num_segment_frees", s.num_segment_frees},
              {"num_maps", s.num_maps},
              {"num_unmaps", s.num_unmaps},
              {"cache_hits", s.cache_hits},
              {"num_ooms", s.num_ooms},
              {"num_retries", s.num_retries},
              {"largest_free_block", s.largest_free_block},
              {"limit", s.limit},
              {"caching", s.caching}};
}

json segment_json(const SegmentInfo& seg) {
  json blocks = json::array();
  for (auto& b : seg.blocks) {
    // pending: released, waiting for work queued on other streams (active bytes, not allocated)
    json jb{{"address", b.address},
            {"size", b.size},
            {"state", !b.mapped     ? "unmapped"
                      : !b.in_use   ? "free"
                      : b.allocated ? "active"
                                    : "pending"}};
    if (b.in_use && b.allocated) {
      jb["allocated"] = b.allocated;
      jb["requested"] = b.requested;
      jb["category"] = category_name(b.category);
      jb["owner"] = b.owner;
      jb["op"] = b.op;
    }
    blocks.push_back(std::move(jb));
  }
  return json{{"address", seg.address},
              {"serial", seg.serial},
              {"size", seg.size},
              {"pool", seg.small_pool ? "small" : "large"},
              {"expandable", seg.expandable},
              {"extent", seg.extent},
              {"virtual_size", seg.virtual_size},
              {"blocks", std::move(blocks)}};
}

json event_json(const MemoryEvent& e) {
  json j{{"kind", event_kind_name(e.kind)}, {"device", e.device.str()}, {"time_ns", e.time_ns}, {"bytes", e.bytes},
         {"allocated", e.allocated},        {"reserved", e.reserved}};
  switch (e.kind) {
    case MemoryEventKind::Alloc:
    case MemoryEventKind::Free:
    case MemoryEventKind::Relabel:
    case MemoryEventKind::Oom:
      j["requested"] = e.requested;
      j["category"] = category_name(e.category);
      j["owner"] = e.owner;
      j["op"] = e.op;
      if (e.kind == MemoryEventKind::Relabel) {
        j["previous_category"] = category_name(e.previous_category);
        j["previous_owner"] = e.previous_owner;
      }
      if (e.kind == MemoryEventKind::Alloc || e.kind == MemoryEventKind::Free) j["carved"] = e.carved;
      if (e.kind == MemoryEventKind::Oom && e.fragmentation)
        j["fragmentation"] = memory::detail::fragmentation_json(*e.fragmentation);
      break;
    case MemoryEventKind::SegmentAlloc:
    case MemoryEventKind::SegmentFree:
    case MemoryEventKind::SegmentMap:
    case MemoryEventKind::SegmentUnmap:
      j["pool"] = e.small_pool ? "small" : "large";
      j["expandable"] = e.expandable;
      break;
    case MemoryEventKind::Evict:
    case MemoryEventKind::Remat:
    case MemoryEventKind::Offload:
    case MemoryEventKind::Fetch:
      j["category"] = category_name(e.category);
      j["owner"] = e.owner;
      break;
    case MemoryEventKind::Annotation:
      j["note"] = e.note;
      break;
  }
  if (e.kind != MemoryEventKind::Annotation && e.kind != MemoryEventKind::Oom) j["address"] = e.address;
  j["by_category"] = categories_json(e.by_category);
  return j;
}

}  // namespace

json memory::detail::fragmentation_json(const Fragmentation& f) {
  json pools = json::array();
  for (const PoolFragmentation& p : f.pools) {
    json bins = json::array();
    for (const HoleSizeBin& h : p.by_hole_size)
      bins.push_back({{"from", h.from}, {"to", h.to}, {"holes", h.holes}, {"bytes", h.bytes}});
    pools.push_back({{"pool", p.small_pool ? "small" : "large"},
                     {"segments", p.segments},
                     {"reserved", p.reserved},
                     {"free_bytes", p.free_bytes},
                     {"largest_free", p.largest_free},
                     {"releasable", p.releasable},
                     {"by_hole_size", std::move(bins)}});
  }
  json split = json::array();
  for (const SplitHole& h : f.split_holes) {
    json pinning = json::array();
    for (const BlockRef& b : h.pinning)
      pinning.push_back({{"address", b.address},
                         {"size", b.size},
                         {"category", category_name(b.category)},
                         {"owner", b.owner},
                         {"op", b.op}});
    split.push_back({{"segment", h.segment},
                     {"address", h.address},
                     {"size", h.size},
                     {"free_bytes", h.free_bytes},
                     {"largest_hole", h.largest_hole},
                     {"pinning", std::move(pinning)}});
  }
  return json{{"request", f.request},
              {"pool", f.small_request ? "small" : "large"},
              {"limit", f.limit},
              {"allocated", f.allocated},
              {"reserved", f.reserved},
              {"cached", f.cached},
              {"caching", f.caching},
              {"expandable", f.expandable},
              {"pools", std::move(pools)},
              {"other_streams", f.other_streams},
              {"fits_in_cache", f.fits_in_cache},
              {"new_memory", f.new_memory},
              {"split_holes", std::move(split)},
              {"fits_after_empty_cache", f.fits_after_empty_cache},
              {"fits_with_other_pool", f.fits_with_other_pool},
              {"fits_expandable", f.fits_expandable},
              {"reason", f.reason}};
}

json memory::detail::device_json(const Device& d) {
  json segments = json::array();
  for (auto& seg : memory_segments(d)) segments.push_back(segment_json(seg));
  return json{{"device", d.str()},
              {"stats", stats_json(memory_stats(d))},
              {"segments", std::move(segments)},
              {"fragmentation", memory::detail::fragmentation_json(fragmentation(d))}};
}

void dump_snapshot(const std::string& path, const std::string& title) {
  json devices = json::array();
  for (const Device& d : devices_with_memory()) devices.push_back(memory::detail::device_json(d));
  json history = json::array();
  for (auto& e : memory_history()) history.push_back(event_json(e));
  json doc{{"format", "memgrad-memory-snapshot"},
           {"version", kSnapshotVersion},
           {"title", title},
           {"byte_counts", "allocated and categories: requests rounded to 512 B; size: carved block size"},
           {"devices", std::move(devices)},
           {"history", std::move(history)}};
  write_file_atomically(path, doc.dump(1) + "\n", "dump_snapshot");  // core/files.h: whole or not at all
}

}  // namespace mg
