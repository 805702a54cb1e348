// Where each device's allocator state lives (cpu, meta, cuda:0..63, and a thread's IsolatedAllocator),
// and the segment source beneath it: aligned malloc on cpu, cudaMalloc on cuda, addresses only on meta.
#include <array>
#include <cstdlib>
#include <mutex>

#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/memory/allocator_impl.h>

namespace mg {

namespace memory::impl {

namespace {

// ---- device registry: cpu, meta, then cuda:0..63; states live until the process ends.

constexpr int kMaxCudaDevices = 64;
std::array<std::atomic<DeviceState*>, 2 + kMaxCudaDevices> g_states{};

int state_index(const Device& d) {
  if (d.is_cpu()) return 0;
  if (d.is_meta()) return 1;
  MG_CHECK(d.index >= 0 && d.index < kMaxCudaDevices, DeviceError, "allocator: expected a cuda index below ",
           kMaxCudaDevices, ", got ", d.index);
  return 2 + d.index;
}

// An IsolatedAllocator's state for this thread, per device slot (null: the device's own).
thread_local std::array<DeviceState*, 2 + kMaxCudaDevices> t_isolated{};

}  // namespace

DeviceState& state(const Device& d) {
  const size_t index = size_t(state_index(d));
  if (DeviceState* s = t_isolated[index]) return *s;
  auto& slot = g_states[index];
  if (DeviceState* s = slot.load(std::memory_order_acquire)) return *s;
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  if (DeviceState* s = slot.load(std::memory_order_acquire)) return *s;
  auto* s = new DeviceState;
  s->device = d;
  if (const char* env = std::getenv("MG_MEMORY_LIMIT")) s->stats.limit = memory::limit_from_env(env, d.type);
  slot.store(s, std::memory_order_release);
  return *s;
}

// ---- segment source

void* source_alloc(DeviceState& s, size_t n) {
  switch (s.device.type) {
    case DeviceType::CPU:
      return std::aligned_alloc(kRoundBytes, n);
    case DeviceType::CUDA:
      return cuda::malloc(s.device.index, n);
    case DeviceType::Meta: {
      // Fake addresses are never reused; up to 2^63 (n <= kMaxRequest) every byte count fits in int64.
      if (s.next_meta_address + n > (uintptr_t(1) << 63)) return nullptr;
      void* p = reinterpret_cast<void*>(s.next_meta_address);
      s.next_meta_address += n;
      return p;
    }
  }
  return nullptr;
}

void source_free(const Device& d, void* p) {
  if (d.is_cpu())
    std::free(p);
  else if (d.is_cuda())
    cuda::free(d.index, p);
}

}  // namespace memory::impl

using namespace memory::impl;

IsolatedAllocator::IsolatedAllocator(const Device& d, int64_t limit) : device_(d) {
  MG_CHECK(limit >= 0, ValueError, "IsolatedAllocator: expected a non-negative limit, got ", limit);
  const size_t index = size_t(state_index(d));
  auto* s = new DeviceState;
  s->device = d;
  s->stats.limit = limit;
  previous_ = t_isolated[index];
  state_ = t_isolated[index] = s;
}

IsolatedAllocator::~IsolatedAllocator() {
  auto* s = static_cast<DeviceState*>(state_);
  t_isolated[size_t(state_index(device_))] = static_cast<DeviceState*>(previous_);
  bool empty = false;
  {
    std::lock_guard<std::mutex> g(s->mu);
    process_events(*s, true);
    release_cached(*s);
    empty = s->segments.empty();
    // Blocks still live (a tensor that outlived the guard) keep their allocator: it no longer caches,
    // so each segment goes back as its last block is freed. The state itself stays (a few bytes).
    s->detached = !empty;
    s->stats.caching = false;
  }
  if (empty) delete s;
}

std::vector<Device> devices_with_memory() {
  std::vector<Device> r;
  for (size_t i = 0; i < g_states.size(); ++i)  // this thread's IsolatedAllocator counts too
    if (DeviceState* s = t_isolated[i] ? t_isolated[i] : g_states[i].load()) r.push_back(s->device);
  return r;
}

}  // namespace mg
