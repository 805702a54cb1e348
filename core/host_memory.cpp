#include <memgrad/core/host_memory.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include <memgrad/core/allocator.h>
#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/error.h>

namespace mg {

namespace {

struct Scope {
  Device served;
};
thread_local const Scope* t_scope = nullptr;

std::mutex& stats_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::pair<int, int>, HostMemoryStats>& all_stats() {
  static auto* s = new std::map<std::pair<int, int>, HostMemoryStats>;  // outlives every storage
  return *s;
}
HostMemoryStats& stats_of(const Device& d) { return all_stats()[{int(d.type), d.index}]; }

void count(const Device& served, Category c, int64_t bytes) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  HostMemoryStats& s = stats_of(served);
  s.allocated += bytes;
  s.by_category[size_t(c)] += bytes;
  s.peak = std::max(s.peak, s.allocated);
}

}  // namespace

Device host_device(const Device& served) { return served.is_meta() ? kMeta : kCPU; }

HostMemoryScope::HostMemoryScope(const Device& served) : previous_(t_scope) { t_scope = new Scope{served}; }
HostMemoryScope::~HostMemoryScope() {
  delete t_scope;
  t_scope = static_cast<const Scope*>(previous_);
}

HostMemoryStats host_memory_stats(const Device& served) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  return stats_of(served);
}

void reset_host_peak(const Device& served) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  HostMemoryStats& s = stats_of(served);
  s.peak = s.allocated;
}

namespace detail {

bool in_host_memory(const Device& d) { return t_scope && host_device(t_scope->served) == d; }

void* host_allocate(size_t nbytes, Category category, std::function<void(void*)>* deleter) {
  const Device served = t_scope->served;
  const int64_t bytes = int64_t(memory::round_size(nbytes));
  void* p = nullptr;
  if (served.is_cuda()) {
    p = cuda::alloc_pinned(size_t(bytes));
    *deleter = [served, category, bytes](void* q) {
      cuda::free_pinned(q, size_t(bytes));
      count(served, category, -bytes);
    };
  } else if (served.is_cpu()) {
    p = std::aligned_alloc(memory::kRoundBytes, size_t(bytes));
    MG_CHECK(p, OutOfMemoryError, "host memory of ", served, ": could not allocate ", format_bytes(bytes));
    *deleter = [served, category, bytes](void* q) {
      std::free(q);
      count(served, category, -bytes);
    };
  } else {  // meta: counted, no bytes
    *deleter = [served, category, bytes](void*) { count(served, category, -bytes); };
  }
  count(served, category, bytes);
  return p;
}

}  // namespace detail

}  // namespace mg
