// memory_summary: the stats of one device as a fixed-width table, like PyTorch's memory_summary.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <memgrad/core/memory.h>

namespace mg {

std::string format_byte_count(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string format_bytes(int64_t bytes) {
  const uint64_t magnitude = bytes < 0 ? 0 - uint64_t(bytes) : uint64_t(bytes);  // also for INT64_MIN
  return (bytes < 0 ? "-" : "") + format_byte_count(magnitude);
}

namespace {

std::string row(const std::string& name, const std::vector<std::string>& cells) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "| %-26s", name.c_str());
  std::string r = buf;
  for (auto& c : cells) {
    std::snprintf(buf, sizeof buf, "| %14s ", c.c_str());
    r += buf;
  }
  return r + "|\n";
}

std::string rule(char c, size_t width) { return "|" + std::string(width - 2, c) + "|\n"; }

}  // namespace

std::string memory_summary(const Device& d) {
  MemoryStats s = memory_stats(d);
  auto b = [](int64_t n) { return format_bytes(n); };
  auto n = [](int64_t v) { return std::to_string(v); };
  std::string head = row("", {"Current", "Peak", "At peak", "Total in/out"});
  const size_t width = head.size() - 1;
  std::string title = "memgrad memory summary, device " + d.str() + (s.caching ? "" : " (caching off)") +
                      (allocator_config().expandable_segments ? " (expandable segments)" : "");
  std::string r = rule('=', width);
  r += "| " + title + std::string(width - 3 - title.size(), ' ') + "|\n";
  r += rule('-', width) + head + rule('-', width);
  r += row("Allocated (rounded)",
           {b(s.allocated), b(s.peak_allocated), b(s.peak_allocated), b(s.total_allocated) + "/" + b(s.total_freed)});
  r += row("Requested", {b(s.requested), b(s.peak_requested), "", ""});
  r += row("Active (blocks)", {b(s.active), b(s.peak_active), "", ""});
  r += row("Reserved (segments)", {b(s.reserved), b(s.peak_reserved), "", ""});
  r += row("Cached free in segments", {b(s.cached()), "", "", ""});
  r += row("Reserved - allocated", {b(s.fragmentation()), "", "", ""});
  r += row("Largest free block", {b(s.largest_free_block), "", "", ""});
  r += rule('-', width);
  // Where the cached bytes are: each pool's free bytes by the size of the hole they are in.
  const Fragmentation f = fragmentation(d);
  r += row("Pools: small / large", {"Segments", "Reserved", "Free", "Largest free"});
  for (const PoolFragmentation& p : f.pools)
    r += row(p.small_pool ? "  small (requests <= 1 MiB)" : "  large",
             {n(p.segments), b(p.reserved), b(p.free_bytes), b(p.largest_free)});
  for (const PoolFragmentation& p : f.pools)
    for (const HoleSizeBin& h : p.by_hole_size)
      r += row(std::string("  ") + (p.small_pool ? "small" : "large") + " holes " + h.range(),
               {n(h.holes) + " holes", b(h.bytes), "", ""});
  if (s.num_maps) r += row("Expandable: maps / unmaps", {n(s.num_maps), n(s.num_unmaps), "", ""});
  r += rule('-', width);
  for (int c = 0; c < kNumCategories; ++c) {
    auto cat = Category(c);
    r += row(category_name(cat), {b(s.category(cat)), b(s.peak(cat)), b(s.at_peak(cat)), ""});
  }
  r += rule('-', width);
  r += row("Allocations / frees", {n(s.num_allocs), n(s.num_frees), "", ""});
  r += row("Cache hits", {n(s.cache_hits), "", "", ""});
  r += row("Segments now / alloc / free", {n(s.num_segments), n(s.num_segment_allocs), n(s.num_segment_frees), ""});
  r += row("OOMs / cache flush retries", {n(s.num_ooms), n(s.num_retries), "", ""});
  r += row("Limit", {s.limit ? b(s.limit) : "none", "", "", ""});
  r += rule('-', width);
  std::vector<std::pair<int64_t, std::string>> owners;
  for (auto& [o, v] : s.at_peak_by_owner) owners.emplace_back(v, o.empty() ? "(no owner)" : o);
  std::sort(owners.rbegin(), owners.rend());
  r += "| Top owners at the peak" + std::string(width - 25, ' ') + "|\n";
  for (size_t i = 0; i < std::min<size_t>(10, owners.size()); ++i) {
    std::string name =
        owners[i].second.size() > 26 ? "..." + owners[i].second.substr(owners[i].second.size() - 23) : owners[i].second;
    r += row(name, {"", "", b(owners[i].first), ""});
  }
  r += rule('=', width);
  return r;
}

}  // namespace mg
