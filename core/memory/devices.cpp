// Where each device's allocator state lives (cpu, meta, cuda:0..63, and a thread's IsolatedAllocator),
// and the segment source beneath it: aligned malloc on cpu, cudaMalloc on cuda, addresses only on meta;
// for expandable segments mmap on cpu and the driver's virtual memory on cuda.
#include <sys/mman.h>
#include <unistd.h>

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
  allocator_config();  // reads MG_ALLOC_CONF (and raises ValueError for a malformed one)
  auto* s = new DeviceState;
  s->device = d;
  // an empty value is no value, as check_environment (core/env.h) and every other MG_* variable take it
  if (const char* env = std::getenv("MG_MEMORY_LIMIT"); env && *env)
    s->stats.limit = memory::limit_from_env(env, d.type);
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

// ---- expandable segments' source: an address range, pages mapped into it and unmapped again

size_t expandable_range(const DeviceState& s) {
  const size_t page = kExpandablePage;
  size_t range = 0;
  switch (s.device.type) {
    case DeviceType::CPU: {  // the machine's memory and an eighth, as PyTorch reserves for a GPU's
      static const size_t memory = [] {
        const size_t bytes = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
        return (bytes + bytes / 8 + kExpandablePage - 1) / kExpandablePage * kExpandablePage;
      }();
      range = memory;
      break;
    }
    case DeviceType::CUDA:
      range = cuda::vm_range(s.device.index);
      break;
    case DeviceType::Meta:
      range = size_t(1) << 46;  // addresses only: as much as any device could have
      break;
  }
  // Under a limit at most twice the limit (mapped pages never pass the limit; the rest is room for
  // holes): a device of 40 MiB does not reserve the machine's memory of address space. A range that
  // fills up is followed by a new one (pools.cpp), on every device alike, so meta plans it exactly.
  if (s.stats.limit > 0) range = std::min(range, (size_t(s.stats.limit) * 2 + page - 1) / page * page);
  return range;
}

void* source_reserve(DeviceState& s, size_t n) {
  const size_t page = kExpandablePage;
  switch (s.device.type) {
    case DeviceType::CPU: {  // PROT_NONE: nothing is committed until a page is mapped read-write
      void* p = mmap(nullptr, n + page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) return nullptr;
      const uintptr_t raw = reinterpret_cast<uintptr_t>(p), base = (raw + page - 1) / page * page;
      if (base > raw) munmap(p, base - raw);  // the range aligned to the page, the rest returned
      munmap(reinterpret_cast<void*>(base + n), raw + page - base);
      return reinterpret_cast<void*>(base);
    }
    case DeviceType::CUDA:
      return cuda::vm_reserve(s.device.index, n);
    case DeviceType::Meta: {
      const uintptr_t base = (s.next_meta_address + page - 1) / page * page;
      if (base + n > (uintptr_t(1) << 63)) return nullptr;
      s.next_meta_address = base + n;
      return reinterpret_cast<void*>(base);
    }
  }
  return nullptr;
}

bool source_map(const Segment& seg, uintptr_t addr, size_t n) {
  const Device& d = seg.state->device;
  if (d.is_cpu()) return mprotect(reinterpret_cast<void*>(addr), n, PROT_READ | PROT_WRITE) == 0;
  if (d.is_cuda()) return cuda::vm_map(d.index, addr, n);
  return true;
}

void source_unmap(const Segment& seg, uintptr_t addr, size_t n) {
  const Device& d = seg.state->device;
  if (d.is_cpu()) {  // the pages go back to the system; touching them again would fault
    madvise(reinterpret_cast<void*>(addr), n, MADV_DONTNEED);
    mprotect(reinterpret_cast<void*>(addr), n, PROT_NONE);
  } else if (d.is_cuda()) {
    cuda::vm_unmap(d.index, seg.stream.handle(), addr, n);
  }
}

void source_release(const Segment& seg) {
  const Device& d = seg.state->device;
  if (d.is_cpu())
    munmap(seg.ptr, seg.size);
  else if (d.is_cuda())
    cuda::vm_release(d.index, seg.base, seg.size);
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
