// The device-independent parts of the CUDA runtime API: record_stream, the TF32 switch and the
// kernel-variant registry (the rest lives in core/cuda/runtime.cu, or no_cuda.cpp without CUDA).
#include <memgrad/core/cuda.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include <memgrad/core/allocator.h>
#include <memgrad/core/storage.h>

namespace mg::cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};

struct Registry {
  std::mutex mu;
  std::map<std::string, std::vector<std::string>> variants;
  std::map<std::string, int> selected;
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

void record_stream(const Tensor& t, const Stream& s) {
  MG_CHECK(t.defined(), ValueError, "record_stream: expected a defined tensor, got an undefined one");
  MG_CHECK(t.device().is_cuda(), DeviceError, "record_stream: expected a cuda tensor, got one on ", t.device());
  MG_CHECK(s.device() == t.device().index, DeviceError, "record_stream: expected a stream on ", t.device(),
           ", got one on cuda:", s.device());
  memory::record_stream(t.storage()->block(), s);  // null block (from_blob memory): nothing to do
}

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

void register_kernel_variants(const std::string& op, const std::vector<std::string>& variants) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.variants[op] = variants;
  r.selected.emplace(op, 0);
}

std::vector<std::string> kernel_ops() {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  std::vector<std::string> ops;
  for (auto& [op, v] : r.variants) ops.push_back(op);
  return ops;
}

std::vector<std::string> kernel_variants(const std::string& op) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.variants.find(op);
  return it == r.variants.end() ? std::vector<std::string>{} : it->second;
}

void set_kernel_variant(const std::string& op, const std::string& variant) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.variants.find(op);
  MG_CHECK(it != r.variants.end(), ValueError, "set_kernel_variant: expected an op with variants, got '", op, "' (",
           r.variants.size(), " ops have variants; see kernel_ops())");
  auto pos = std::find(it->second.begin(), it->second.end(), variant);
  if (pos == it->second.end()) {
    std::string names;
    for (auto& v : it->second) names += (names.empty() ? "" : ", ") + v;
    throw ValueError(
        detail::str("set_kernel_variant: expected one of [", names, "] for '", op, "', got '", variant, "'"));
  }
  r.selected[op] = int(pos - it->second.begin());
}

std::string kernel_variant(const std::string& op) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.variants.find(op);
  return it == r.variants.end() ? std::string() : it->second[size_t(r.selected[op])];
}

int kernel_variant_index(const std::string& op) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.selected.find(op);
  return it == r.selected.end() ? 0 : it->second;
}

}  // namespace mg::cuda
