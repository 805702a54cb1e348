// The kernel-variant registry (core/variants.h, core/variants_impl.h), for every device type.
#include <memgrad/core/variants.h>
#include <memgrad/core/variants_impl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

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

// The variant MG_KERNEL_VARIANTS names for `op` on `d` ("cuda:attention=simt,cpu:matmul=eigen"), as
// an index into `names`; 0 (the default) where it names none. Backends register their variants while
// the library loads, where an exception cannot be caught: a name that is not a variant is reported
// on stderr and the default kept.
int variant_from_env(DeviceType d, const std::string& op, const std::vector<std::string>& names) {
  const char* env = std::getenv("MG_KERNEL_VARIANTS");
  if (!env) return 0;
  const std::string key = std::string(d == DeviceType::CUDA  ? "cuda"
                                      : d == DeviceType::CPU ? "cpu"
                                                             : "meta") +
                          ":" + op;
  std::stringstream list(env);
  for (std::string item; std::getline(list, item, ',');) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || item.substr(0, eq) != key) continue;
    const std::string variant = item.substr(eq + 1);
    auto pos = std::find(names.begin(), names.end(), variant);
    if (pos != names.end()) return int(pos - names.begin());
    std::fprintf(stderr, "memgrad: MG_KERNEL_VARIANTS: %s has no variant '%s'; keeping '%s'\n", key.c_str(),
                 variant.c_str(), names.empty() ? "" : names.front().c_str());
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

}  // namespace mg
