// The host pool: offload (a storage's bytes copied out, its block freed), fetch (copied back) and
// prefetch (ahead of backward's reads). On cuda the copies run on a side stream.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include <memgrad/core/budget/cell_impl.h>
#include <memgrad/core/cuda/runtime_impl.h>

namespace mg::budget {

namespace impl {

namespace {
thread_local bool t_prefetching = false;  // a prefetch's allocation: refused rather than making room
}  // namespace

bool prefetching() { return t_prefetching; }

namespace {
// cpu: host-pool buffers go back to a cache when freed and are handed out again for the same size,
// as PyTorch's CachingHostAllocator keeps its pinned blocks. A copy into pages malloc maps afresh
// pays a fault per page (about 10 GB/s here, against 30-60 GB/s into touched pages), and whether
// malloc maps afresh depends on its thresholds and the step's history: reused buffers make a copy
// take what the probe at enable() measured. Kept bytes never exceed the most ever handed out at once
// (sizes that vary from step to step do not pile up); disable() frees them (release_host_cache).
struct HostCache {
  std::mutex mu;
  std::unordered_multimap<size_t, void*> free;
  size_t live = 0, peak_live = 0, kept = 0;
};
HostCache& host_cache() {
  static auto* c = new HostCache;
  return *c;
}
}  // namespace

void release_host_cache() {
  HostCache& c = host_cache();
  std::lock_guard<std::mutex> g(c.mu);
  for (auto& [size, p] : c.free) std::free(p);
  c.free.clear();
  c.kept = 0, c.peak_live = c.live;
}

size_t host_cache_bytes() {
  HostCache& c = host_cache();
  std::lock_guard<std::mutex> g(c.mu);
  return c.kept;
}

// Host-pool bytes: page-locked on cuda (so copies can overlap), plain aligned memory on cpu. Either
// way outside the device's ledger: the pool is accounted in Stats::host_bytes.
std::shared_ptr<void> host_alloc(const Device& d, size_t n) {
  if (d.is_meta()) {  // no bytes: a token that stands for the copy
    static char token;
    return std::shared_ptr<void>(&token, [](void*) {});
  }
  if (d.is_cuda()) {
    Tensor t = cuda::empty_pinned({int64_t(n)}, kBool);
    void* p = t.raw_data();
    return std::shared_ptr<void>(p, [t](void*) {});
  }
  const size_t size = memory::round_size(n);
  HostCache& c = host_cache();
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> g(c.mu);
    if (auto it = c.free.find(size); it != c.free.end()) p = it->second, c.free.erase(it), c.kept -= size;
  }
  if (!p) p = std::aligned_alloc(memory::kRoundBytes, size);
  MG_CHECK(p, OutOfMemoryError, "budget: the host pool could not allocate ", format_bytes(int64_t(n)));
  {
    std::lock_guard<std::mutex> g(c.mu);
    c.live += size, c.peak_live = std::max(c.peak_live, c.live);
  }
  return std::shared_ptr<void>(p, [size](void* q) {
    HostCache& c = host_cache();
    std::lock_guard<std::mutex> g(c.mu);
    c.live -= size;
    if (c.kept + size > c.peak_live) return std::free(q);
    c.free.emplace(size, q), c.kept += size;
  });
}

void add_host_bytes(DeviceBudget& db, int64_t n) {
  db.stats.host_bytes += n;
  db.stats.peak_host_bytes = std::max(db.stats.peak_host_bytes, db.stats.host_bytes);
}

namespace {
// cuda: transfers run on a side stream, after the work queued on the compute stream so far. A block
// copied out goes back to the allocator at once, marked as used on the side stream (it is reused
// only when the copy has finished); a copy in makes the compute stream wait for it. Either way the
// host bytes stay alive until the copy's completion event (not on cudaFreeHost's synchronising).
struct SideStream {
  cuda::Stream stream;
  std::vector<std::pair<cuda::Event, std::shared_ptr<void>>> in_flight;  // host bytes of copies
};
SideStream& side(const Device& d) {
  static auto* all = new std::map<int, SideStream>;
  auto it = all->find(d.index);
  if (it == all->end()) it = all->emplace(d.index, SideStream{cuda::Stream::create(d.index), {}}).first;
  auto& f = it->second.in_flight;  // copies that have completed free their host bytes
  f.erase(std::remove_if(f.begin(), f.end(), [](const auto& e) { return e.first.query(); }), f.end());
  return it->second;
}
Tensor bytes_view(void* p, size_t n, const Device& d) {
  return make_tensor(std::make_shared<Storage>(p, n, d, nullptr), {int64_t(n)}, {1}, 0, kBool);
}
void copy_on_side(Cell& c, void* host, bool out) {
  SideStream& s = side(c.device);
  cuda::Event queued;
  queued.record(cuda::current_stream(c.device.index));
  queued.wait(s.stream);
  {
    cuda::StreamGuard guard(s.stream);
    Tensor dev = bytes_view(c.block->ptr, c.nbytes, c.device), pinned = bytes_view(host, c.nbytes, kCPU);
    out ? cuda::copy_async(pinned, dev) : cuda::copy_async(dev, pinned);
  }
  memory::record_stream(c.block, s.stream);  // the block is reused only after the copy
  cuda::Event done;
  done.record(s.stream);
  s.in_flight.emplace_back(done, c.host);
  if (!out) c.arrival = done;  // waited for by the compute stream when a kernel touches the cell
}
}  // namespace

// The compute stream waits for a copy in before the first kernel that touches the cell.
void await_arrival(Cell& c) {
  if (!c.arrival) return;
  c.arrival->wait(cuda::current_stream(c.device.index));
  c.arrival.reset();
}

void offload(Cell& c) {
  auto& db = device_budget(c.device);
  const int64_t t0 = now_ns();
  c.host = host_alloc(c.device, c.nbytes);
  if (c.device.is_cuda())
    copy_on_side(c, c.host.get(), true);
  else if (c.device.is_cpu())
    std::memcpy(c.host.get(), c.block->ptr, c.nbytes);
  db.stats.modeled_seconds += db.options.model.copy_seconds(double(c.nbytes));
  ++db.stats.offloads;
  db.stats.offloaded_bytes[size_t(c.block->category)] += int64_t(c.block->size);
  add_host_bytes(db, int64_t(memory::round_size(c.nbytes)));
  record_event(c, MemoryEventKind::Offload);
  release_block(c);
  db.stats.transfer_seconds += seconds_since(t0);
}

void fetch(Cell& c) {
  auto& db = device_budget(c.device);
  ++c.locks;  // the allocation below may evict others, never this one
  Block* b = nullptr;
  try {
    b = allocate_for(c);
  } catch (...) {
    --c.locks;
    throw;
  }
  --c.locks;
  const int64_t t0 = now_ns();
  c.block = b;
  if (c.device.is_cuda())
    copy_on_side(c, c.host.get(), false);
  else if (c.device.is_cpu())
    std::memcpy(b->ptr, c.host.get(), c.nbytes);
  db.stats.modeled_seconds += db.options.model.copy_seconds(double(c.nbytes));
  c.host.reset();
  add_host_bytes(db, -int64_t(memory::round_size(c.nbytes)));
  ++db.stats.fetches;
  record_event(c, MemoryEventKind::Fetch);
  db.stats.transfer_seconds += seconds_since(t0);
}

// Optimizer state offloaded on cpu is used where it is: the step runs on the host pool (ZeRO-Offload's
// split; on cpu the host is the device's processor), so it is never copied back for a kernel.
bool steps_on_host(const Device& d) { return d.is_cpu() || (d.is_meta() && meta_target() == DeviceType::CPU); }
bool stays_on_host(const Cell& c) {
  return c.offloaded() && steps_on_host(c.device) && c.category == Category::OptimizerState;
}

}  // namespace impl

namespace detail {

using namespace impl;

void prefetch(const std::vector<std::weak_ptr<Storage>>& storages) {
  Lock g(mu());
  for (auto& w : storages) {
    auto s = w.lock();
    if (!s || !active(s->device())) continue;
    auto& db = device_budget(s->device());
    const std::shared_ptr<Cell>& c = s->budget_cell();
    if (!db.options.prefetch || !c || !c->offloaded() || stays_on_host(*c)) continue;
    const MemoryStats m = memory_stats(c->device);
    if (m.limit > 0 && m.allocated + int64_t(memory::round_size(c->nbytes)) > m.limit) continue;
    struct Prefetching {
      Prefetching() { t_prefetching = true; }
      ~Prefetching() { t_prefetching = false; }
    } scope;
    try {
      fetch(*c);
      c->last_use = clock(db);
      ++db.stats.prefetches;
    } catch (const PrefetchRefused&) {  // it did not fit: the kernel that reads it fetches it
    }
  }
}

}  // namespace detail
}  // namespace mg::budget
