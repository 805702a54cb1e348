// The kernel-variant registry (core/variants.h, core/variants_impl.h), for every device type.
#include <memgrad/core/variants.h>
#include <memgrad/core/variants_impl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include <memgrad/core/env.h>
#include <memgrad/core/error.h>

namespace mg {

namespace {
struct Entry {
  std::vector<std::string> names;
  std::atomic<int> selected{0};  // map nodes never move, so kernels may keep a reference
  std::function<std::string(const std::string&)> describe;
};
struct Registry {
  std::mutex mu;
  std::map<std::pair<DeviceType, std::string>, Entry> entries;
};
Registry& registry() {
  static Registry r;
  return r;
}

const char* device_prefix(DeviceType d) {
  return d == DeviceType::CUDA ? "cuda" : d == DeviceType::CPU ? "cpu" : "meta";
}

// MG_KERNEL_VARIANTS's items ("cuda:attention=simt,cpu:matmul=eigen"; empty items skipped) as
// (device:op, variant) pairs; "" and the message of the first malformed item in `error`.
std::vector<std::pair<std::string, std::string>> variant_items(const std::string& text, std::string* error) {
  std::vector<std::pair<std::string, std::string>> items;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    if (item.empty()) continue;
    const size_t eq = item.find('='), colon = item.find(':');
    const std::string device = item.substr(0, std::min(colon, item.size()));
    if (eq == std::string::npos || colon > eq || colon + 1 == eq || eq + 1 == item.size() ||
        (device != "cpu" && device != "cuda" && device != "meta")) {
      if (error->empty())
        *error = "the item '" + env::shown(item) + "' is not device:op=variant (device cpu, cuda or meta)";
      continue;
    }
    items.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return items;
}

// The variant MG_KERNEL_VARIANTS names for `op` on `d`, as an index into `names`; 0 (the default)
// where it names none. Backends register their variants while the library loads, where an
// exception cannot be caught: a malformed value, or a name that is not a variant, is said on stderr
// (core/env.h) and the default kept.
int variant_from_env(DeviceType d, const std::string& op, const std::vector<std::string>& names) {
  const char* text = std::getenv("MG_KERNEL_VARIANTS");
  if (!text) return 0;
  std::string error;
  const auto items = variant_items(text, &error);
  static bool said = false;  // (registration runs under the registry's lock)
  if (!error.empty() && !said) env::warn_ignored(env::message("MG_KERNEL_VARIANTS", text, error));
  said = said || !error.empty();
  const std::string key = std::string(device_prefix(d)) + ":" + op;
  for (const auto& [name, variant] : items) {
    if (name != key) continue;
    auto pos = std::find(names.begin(), names.end(), variant);
    if (pos != names.end()) return int(pos - names.begin());
    env::warn_ignored(env::message(
        "MG_KERNEL_VARIANTS", text,
        key + " has no variant '" + env::shown(variant) + "'; keeping '" + (names.empty() ? "" : names.front()) + "'"));
  }
  return 0;
}
}  // namespace

const std::atomic<int>& detail::register_kernel_variants(DeviceType d, const std::string& op,
                                                         const std::vector<std::string>& variants) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  Entry& e = r.entries[{d, op}];
  e.names = variants;
  e.selected = variant_from_env(d, op, variants);
  return e.selected;
}

void detail::describe_kernel_variants(DeviceType d, const std::string& op,
                                      std::function<std::string(const std::string& variant)> describe) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.entries[{d, op}].describe = std::move(describe);
}

std::string kernel_variant_detail(DeviceType d, const std::string& op, const std::string& variant) {
  std::function<std::string(const std::string&)> describe;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    auto it = r.entries.find({d, op});
    if (it != r.entries.end()) describe = it->second.describe;
  }
  return describe ? describe(variant) : std::string();
}

std::vector<std::string> kernel_ops(DeviceType d) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  std::vector<std::string> ops;
  for (auto& [key, e] : r.entries)
    if (key.first == d) ops.push_back(key.second);
  return ops;
}

std::vector<std::string> kernel_variants(DeviceType d, const std::string& op) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.entries.find({d, op});
  return it == r.entries.end() ? std::vector<std::string>{} : it->second.names;
}

void set_kernel_variant(DeviceType d, const std::string& op, const std::string& variant) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.entries.find({d, op});
  MG_CHECK(it != r.entries.end(), ValueError, "set_kernel_variant: expected an op with variants on ", Device(d),
           ", got '", op, "' (see kernel_ops())");
  const std::vector<std::string>& names = it->second.names;
  auto pos = std::find(names.begin(), names.end(), variant);
  if (pos == names.end()) {
    std::string list;
    for (auto& v : names) list += (list.empty() ? "" : ", ") + v;
    throw ValueError(detail::str("set_kernel_variant: expected one of [", list, "] for '", op, "' on ", Device(d),
                                 ", got '", variant, "'"));
  }
  it->second.selected = int(pos - names.begin());
}

std::string kernel_variant(DeviceType d, const std::string& op) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.entries.find({d, op});
  return it == r.entries.end() ? std::string() : it->second.names[size_t(it->second.selected.load())];
}

std::string detail::kernel_variants_env_error(const std::string& text) {
  std::string error;
  const auto items = variant_items(text, &error);
  if (!error.empty()) return error;
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  for (const auto& [name, variant] : items) {
    const size_t colon = name.find(':');
    const std::string device = name.substr(0, colon), op = name.substr(colon + 1);
    const DeviceType d = device == "cuda" ? DeviceType::CUDA : device == "cpu" ? DeviceType::CPU : DeviceType::Meta;
    auto it = r.entries.find({d, op});
    if (it == r.entries.end()) {
      std::string ops;
      for (auto& [key, e] : r.entries)
        if (key.first == d) ops += (ops.empty() ? "" : ", ") + key.second;
      return "'" + env::shown(name) + "': " + device + " has no kernel '" + env::shown(op) + "' with variants in " +
             "this build (" + (ops.empty() ? "none" : ops) + ")";
    }
    const std::vector<std::string>& names = it->second.names;
    if (std::find(names.begin(), names.end(), variant) == names.end()) {
      std::string list;
      for (auto& v : names) list += (list.empty() ? "" : ", ") + v;
      return "'" + env::shown(name) + "' has no variant '" + env::shown(variant) + "' (" + list + ")";
    }
  }
  return {};
}

}  // namespace mg
