// The allocator's configuration: set_allocator_config and MG_ALLOC_CONF, spelled as PyTorch's
// PYTORCH_CUDA_ALLOC_CONF ("expandable_segments:True").
#include <atomic>
#include <cstdlib>

#include <memgrad/core/env.h>
#include <memgrad/core/memory/allocator_impl.h>

namespace mg {

namespace {

const char* const kAccepted = "expandable_segments (True or False)";

// `text` read over `c`: keys it does not name keep their values. A bad item raises ValueError with
// `where` (the variable or the call, with the value shown once and cut short: core/env.h) first.
AllocatorConfig parse(const std::string& text, const std::string& where, AllocatorConfig c) {
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;  // "a:b," and "" are fine, as PyTorch takes them
    const size_t colon = item.find(':');
    const std::string key = item.substr(0, colon), value = colon == std::string::npos ? "" : item.substr(colon + 1);
    MG_CHECK(key == "expandable_segments", ValueError, where, ": unknown key \"", env::shown(key),
             "\"; the accepted keys are ", kAccepted);
    MG_CHECK(value == "True" || value == "False", ValueError, where,
             ": expandable_segments takes True or False, got \"", env::shown(value), "\"; the accepted keys are ",
             kAccepted);
    c.expandable_segments = value == "True";
  }
  return c;
}

std::atomic<bool> g_expandable{false};

// MG_ALLOC_CONF, read once when the first allocator starts (or the configuration is first asked for).
void read_environment() {
  static const bool once = [] {
    if (const char* value = std::getenv("MG_ALLOC_CONF"))
      g_expandable = parse(value, "MG_ALLOC_CONF=" + env::shown(value), {}).expandable_segments;
    return true;
  }();
  (void)once;
}

}  // namespace

void set_allocator_config(const std::string& config) {
  read_environment();  // the call wins over the environment, whichever comes first
  g_expandable =
      parse(config, "set_allocator_config(\"" + env::shown(config) + "\")", allocator_config()).expandable_segments;
}

AllocatorConfig allocator_config() {
  read_environment();
  return AllocatorConfig{g_expandable.load(std::memory_order_relaxed)};
}

namespace memory::impl {
bool expandable(const DeviceState& s) { return s.stats.caching && g_expandable.load(std::memory_order_relaxed); }
}  // namespace memory::impl

}  // namespace mg
