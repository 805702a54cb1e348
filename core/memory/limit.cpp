// The memory limit (set_memory_limit, MG_MEMORY_LIMIT) and the report an allocation past it raises:
// what was asked for, by whom, and where the device's bytes are.
#include <algorithm>
#include <cctype>
#include <mutex>

#include <memgrad/core/env.h>
#include <memgrad/core/memory/allocator_impl.h>

namespace mg {

namespace memory::impl {

[[noreturn]] void throw_oom(DeviceState& s, const Block& b, const cuda::Stream& stream, size_t segment_size,
                            OomCause cause) {
  auto& st = s.stats;
  ++st.num_ooms;
  if (s.bare_oom) throw OutOfMemoryError("out of memory (a replayed allocation trace)");
  auto forensics = std::make_shared<const Fragmentation>(analyze(s, &b, stream, cause));
  record(s, MemoryEventKind::Oom, int64_t(std::min<size_t>(b.size, INT64_MAX)), 0, &b, Category::Other, {}, nullptr,
         nullptr, forensics);
  std::string m = mg::detail::str("out of memory on ", s.device, ": tried to allocate ", format_byte_count(b.size));
  if (b.op) m += mg::detail::str(" in ", b.op);
  if (b.owner_id) m += mg::detail::str(" for \"", b.owner(), "\"");
  m += " (" + std::string(category_name(b.category)) + ")";
  if (cause == OomCause::DeviceRefused)
    m += mg::detail::str("; the device refused a segment of ", format_byte_count(segment_size));
  if (cause == OomCause::AddressSpace)
    m += mg::detail::str("; the system refused ", format_byte_count(segment_size),
                         " of address space for a new expandable segment (a limit on the process's address space, "
                         "such as ulimit -v, is below it: raise it, or run without expandable segments)");
  if (cause == OomCause::TooLarge)
    m += mg::detail::str("; no device can address more than ", format_byte_count(memory::kMaxRequest));
  if (cause == OomCause::Injected) m += "; injected by memory::fail_allocation_after (a test hook)";
  if (st.limit > 0)
    m += mg::detail::str("; limit ", format_bytes(st.limit), ", allocated ", format_bytes(st.allocated), ", reserved ",
                         format_bytes(st.reserved), ", free ",
                         format_bytes(std::max<int64_t>(0, st.limit - st.reserved)), " under the limit plus ",
                         format_bytes(st.reserved - st.active), " cached in segments");
  else
    m += mg::detail::str("; allocated ", format_bytes(st.allocated), ", reserved ", format_bytes(st.reserved));
  m += ".\nAllocated by category:";
  for (int c = 0; c < kNumCategories; ++c)
    if (st.by_category[size_t(c)])
      m += mg::detail::str(" ", category_name(Category(c)), " ", format_bytes(st.by_category[size_t(c)]), ";");
  std::vector<std::pair<int64_t, std::string>> owners;
  for (auto& [o, n] : by_label(s.by_owner)) owners.emplace_back(n, o.empty() ? "(no owner)" : o);
  std::sort(owners.rbegin(), owners.rend());
  if (!owners.empty()) m += "\nTop owners:";
  for (size_t i = 0; i < std::min<size_t>(5, owners.size()); ++i)
    m += mg::detail::str(" ", owners[i].second, " ", format_bytes(owners[i].first), ";");
  m += "\nWhat to try: run the model in checkpoint segments (activations are recomputed in backward instead of kept), "
       "store the model in half precision (float16/bfloat16 storage with float32 master weights saves every "
       "activation in half; autocast keeps float32 weights and can save more), use a smaller batch (see "
       "find_max_batch_size), or split the batch into micro-batches and accumulate their gradients before each "
       "optimizer step.";
  throw OutOfMemoryError(m, std::move(forensics));
}

}  // namespace memory::impl

using namespace memory::impl;

namespace {
// A byte count of MG_MEMORY_LIMIT's value `spec` (all of it, or one item's).
int64_t parse_size(const std::string& text, const std::string& spec) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (auto& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  for (auto [suffix, s] : {std::pair{'K', 1024.0}, {'M', 1024.0 * 1024}, {'G', 1024.0 * 1024 * 1024}})
    if (!unit.empty() && unit[0] == suffix && (unit.size() == 1 || unit.substr(1) == "B" || unit.substr(1) == "IB"))
      scale = s;
  MG_CHECK(used > 0 && scale > 0 && v >= 0 && v * scale < 0x1p63, ValueError,
           env::message("MG_MEMORY_LIMIT", spec,
                        (text == spec ? "" : "'" + env::shown(text) + "': ") +
                            "expected a byte count such as 1073741824, 512M or 8GiB (below 8 EiB)"));
  return int64_t(v * scale);
}
}  // namespace

int64_t memory::limit_from_env(const std::string& spec, DeviceType type) {
  static const char* names[] = {"cpu", "cuda", "meta"};
  if (spec.find('=') == std::string::npos) return type == DeviceType::Meta ? 0 : parse_size(spec, spec);
  int64_t limit = 0;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = std::min(spec.find(',', pos), spec.size());
    std::string item = spec.substr(pos, end - pos);
    size_t eq = item.find('=');
    MG_CHECK(
        eq != std::string::npos, ValueError,
        env::message("MG_MEMORY_LIMIT", spec, "'" + env::shown(item) + "': expected items such as cpu=1G,cuda=8G"));
    std::string key = item.substr(0, eq);
    MG_CHECK(
        key == "cpu" || key == "cuda" || key == "meta", ValueError,
        env::message("MG_MEMORY_LIMIT", spec, "'" + env::shown(key) + "': expected a device type cpu, cuda or meta"));
    int64_t v = parse_size(item.substr(eq + 1), spec);
    if (key == names[size_t(type)]) limit = v;
    pos = end + 1;
  }
  return limit;
}

void set_memory_limit(const Device& d, int64_t bytes) {
  MG_CHECK(bytes >= 0, ValueError, "set_memory_limit: expected a non-negative byte count, got ", bytes);
  DeviceState& s = state(d);
  std::lock_guard<std::mutex> g(s.mu);
  s.stats.limit = bytes;
}

}  // namespace mg
