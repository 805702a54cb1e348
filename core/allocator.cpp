#include <memgrad/core/allocator.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <memgrad/core/error.h>
#include <memgrad/kernels/cuda/runtime.h>

namespace mg {

const char* category_name(Category c) {
  static const char* names[] = {"Parameter", "Gradient", "OptimizerState", "Activation",
                                "Temporary", "Input",    "Workspace",      "Other"};
  return names[size_t(c)];
}

namespace {

thread_local std::optional<Category> t_category;
thread_local std::string t_owner;
thread_local const char* t_op = nullptr;

constexpr size_t kRound = 512;
size_t round_size(size_t n) { return n == 0 ? kRound : (n + kRound - 1) / kRound * kRound; }

// Per-device ledger. One mutex per device keeps allocation thread-safe.
struct DeviceLedger {
  std::mutex mu;
  MemoryStats stats;
  std::map<std::string, int64_t> by_owner;
  uintptr_t next_meta_address = 0x1000;
};

DeviceLedger& ledger(const Device& d) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, DeviceLedger> all;
  std::lock_guard<std::mutex> g(mu);
  return all[{int(d.type), d.index}];
}

void* source_alloc(DeviceLedger& l, const Device& d, size_t n) {
  switch (d.type) {
    case DeviceType::CPU: return std::aligned_alloc(64, n);
    case DeviceType::CUDA: return cuda::malloc(d.index, n);
    case DeviceType::Meta: {
      void* p = reinterpret_cast<void*>(l.next_meta_address);
      l.next_meta_address += n;
      return p;
    }
  }
  return nullptr;
}

void source_free(const Device& d, void* p) {
  if (d.is_cpu()) std::free(p);
  else if (d.is_cuda()) cuda::free(d.index, p);
}

void account(DeviceLedger& l, Block* b, int64_t sign) {
  auto& s = l.stats;
  int64_t n = sign * int64_t(b->size);
  s.allocated += n;
  s.reserved += n;
  s.requested += sign * int64_t(b->requested);
  s.by_category[size_t(b->category)] += n;
  auto& o = l.by_owner[b->owner];
  o += n;
  if (o == 0) l.by_owner.erase(b->owner);
  for (int c = 0; c < kNumCategories; ++c)
    s.peak_by_category[c] = std::max(s.peak_by_category[c], s.by_category[c]);
  s.peak_reserved = std::max(s.peak_reserved, s.reserved);
  if (s.allocated > s.peak_allocated) {
    s.peak_allocated = s.allocated;
    s.at_peak_by_category = s.by_category;
    s.at_peak_by_owner = l.by_owner;
  }
}

}  // namespace

MemoryScope::MemoryScope(Category c) : prev_category_(t_category), prev_owner_len_(t_owner.size()) {
  t_category = c;
}
MemoryScope::MemoryScope(const std::string& owner)
    : prev_category_(t_category), prev_owner_len_(t_owner.size()) {
  if (!owner.empty()) t_owner += (t_owner.empty() ? "" : ".") + owner;
}
MemoryScope::MemoryScope(Category c, const std::string& owner) : MemoryScope(owner) { t_category = c; }
MemoryScope::~MemoryScope() {
  t_category = prev_category_;
  t_owner.resize(prev_owner_len_);
}

Category current_category(Category fallback) { return t_category.value_or(fallback); }
const std::string& current_owner() { return t_owner; }

OpScope::OpScope(const char* op) : prev_(t_op) { t_op = op; }
OpScope::~OpScope() { t_op = prev_; }

namespace memory {

const char* current_op() { return t_op; }

Block* allocate(const Device& d, size_t nbytes, Category fallback) {
  check_device_usable(d);
  auto& l = ledger(d);
  auto b = std::make_unique<Block>();
  b->requested = nbytes;
  b->size = round_size(nbytes);
  b->device = d;
  b->category = current_category(fallback);
  b->owner = t_owner.empty() && t_op ? std::string(t_op) : t_owner;
  std::lock_guard<std::mutex> g(l.mu);
  auto& s = l.stats;
  if (s.limit > 0 && s.allocated + int64_t(b->size) > s.limit) {
    ++s.num_ooms;
    throw OutOfMemoryError(detail::str("out of memory on ", d, ": tried to allocate ", b->size,
                                       " bytes; limit ", s.limit, ", allocated ", s.allocated, ", free ",
                                       s.limit - s.allocated));
  }
  b->ptr = source_alloc(l, d, b->size);
  MG_CHECK(b->ptr || d.is_meta(), OutOfMemoryError, "out of memory on ", d, ": the system refused ",
           b->size, " bytes");
  ++s.num_allocs;
  ++s.num_segments;
  account(l, b.get(), +1);
  return b.release();
}

void release(Block* b) {
  if (!b) return;
  auto& l = ledger(b->device);
  {
    std::lock_guard<std::mutex> g(l.mu);
    account(l, b, -1);
    ++l.stats.num_frees;
  }
  source_free(b->device, b->ptr);
  delete b;
}

void set_category(Block* b, Category c) {
  if (!b || b->category == c) return;
  auto& l = ledger(b->device);
  std::lock_guard<std::mutex> g(l.mu);
  account(l, b, -1);
  b->category = c;
  account(l, b, +1);
}

}  // namespace memory

MemoryStats memory_stats(const Device& d) {
  auto& l = ledger(d);
  std::lock_guard<std::mutex> g(l.mu);
  return l.stats;
}

void reset_peak(const Device& d) {
  auto& l = ledger(d);
  std::lock_guard<std::mutex> g(l.mu);
  auto& s = l.stats;
  s.peak_allocated = s.allocated;
  s.peak_reserved = s.reserved;
  s.peak_by_category = s.by_category;
  s.at_peak_by_category = s.by_category;
  s.at_peak_by_owner = l.by_owner;
}

void set_memory_limit(const Device& d, int64_t bytes) {
  MG_CHECK(bytes >= 0, ValueError, "set_memory_limit: expected a non-negative byte count, got ", bytes);
  auto& l = ledger(d);
  std::lock_guard<std::mutex> g(l.mu);
  l.stats.limit = bytes;
}

std::map<std::string, int64_t> memory_by_owner(const Device& d) {
  auto& l = ledger(d);
  std::lock_guard<std::mutex> g(l.mu);
  return l.by_owner;
}

}  // namespace mg
