// The CUDA device runtime: the segment source for the allocator (cudaMalloc, and the driver's
// virtual memory calls for expandable segments), streams, events, pinned host memory and copies.
// Kernels launch on current_stream(device).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <mutex>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include <memgrad/core/allocator.h>
#include <memgrad/core/cuda.h>
#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>

namespace mg::cuda {
namespace {
std::string g_last_error;
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw DeviceError(detail::str("cuda: ", what, " failed: ", cudaGetErrorString(e)));
}
int resolve(int device) {
  if (device >= 0) {
    check_device_usable(cuda_device(device));
    return device;
  }
  check_device_usable(cuda_device(0));
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}
// Per thread, per device: the stream memgrad uses (default-constructed: the legacy stream).
thread_local std::vector<Stream> t_streams;
Stream& stream_slot(int device) {
  if (t_streams.size() <= size_t(device)) t_streams.resize(size_t(device) + 1);
  return t_streams[size_t(device)];
}
cudaStream_t raw(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

// Makes `device` current for a scope and restores the caller's device at its end, so that a call
// on behalf of the allocator leaves the device the user chose.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    set_ = prev_ != device;
  }
  ~DeviceGuard() {
    if (set_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool set_ = false;
};

// free() runs inside release() and cannot throw: a failure is kept and raised as DeviceError by the
// next malloc(), the allocator's next call that can.
std::mutex g_free_mu;
std::string g_free_error;
void raise_free_error() {
  std::lock_guard<std::mutex> g(g_free_mu);
  if (g_free_error.empty()) return;
  std::string e = std::move(g_free_error);
  g_free_error.clear();
  throw DeviceError(e);
}

std::mutex g_pinned_mu;
std::unordered_set<const void*> g_pinned;  // live pinned allocations (base pointers)
std::atomic<int64_t> g_pinned_bytes{0};
}  // namespace

bool built() { return true; }

int device_count() {
  static int count = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      g_last_error = cudaGetErrorString(e);
      (void)cudaGetLastError();
      return 0;
    }
    if (n == 0) g_last_error = "cudaGetDeviceCount found no device";
    return n;
  }();
  return count;
}

std::string last_error() {
  device_count();
  return g_last_error;
}

void* malloc(int device, size_t bytes) {
  raise_free_error();
  DeviceGuard guard(device);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

void free(int device, void* p) {
  if (!p) return;
  int prev = device;  // kept when cudaGetDevice fails: nothing to restore then
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess && prev != device) e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaFree(p);  // synchronises the device, so pending kernels never see reused bytes
  if (prev != device) (void)cudaSetDevice(prev);
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  std::lock_guard<std::mutex> g(g_free_mu);
  if (g_free_error.empty())
    g_free_error = detail::str("cuda: cudaFree of a segment of cuda:", device, " failed: ", cudaGetErrorString(e));
}

// ---- virtual memory for expandable segments
//
// The driver's calls are fetched from the runtime (cudaGetDriverEntryPointByVersion) rather than
// linked: a program that links libcuda does not start where no driver is installed (CI builds
// here), while libcudart finds the driver when it runs. Each page of an expandable segment is
// its own physical allocation, so that any page can be unmapped alone (the driver cannot split one).

namespace {

struct Driver {
  PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
};

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    auto get = [](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
      check(cudaGetDriverEntryPointByVersion(name, &p, 10020, cudaEnableDefault, &found), name);
      MG_CHECK(found == cudaDriverEntryPointSuccess && p, DeviceError, "cuda: the driver has no ", name,
               " (expandable segments need CUDA's virtual memory management, driver 10.2 or later)");
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    get("cuMemAddressReserve", r.address_reserve);
    get("cuMemAddressFree", r.address_free);
    get("cuMemCreate", r.create);
    get("cuMemRelease", r.release);
    get("cuMemMap", r.map);
    get("cuMemUnmap", r.unmap);
    get("cuMemSetAccess", r.set_access);
    get("cuMemGetAllocationGranularity", r.granularity);
    return r;
  }();
  return d;
}

void check_driver(CUresult r, const char* what) {
  MG_CHECK(r == CUDA_SUCCESS, DeviceError, "cuda: ", what, " failed: CUresult ", int(r));
}

CUmemAllocationProp page_properties(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

// The physical pages mapped into expandable segments, by address (one handle per page).
std::mutex g_pages_mu;
std::map<uintptr_t, CUmemGenericAllocationHandle> g_pages;

// Unmaps and releases the pages in [addr, addr + bytes); never throws (it may run inside release()):
// a failure is kept for the next malloc or map to raise.
void drop_pages(uintptr_t addr, size_t bytes) {
  const Driver& d = driver();
  std::lock_guard<std::mutex> g(g_pages_mu);
  for (auto it = g_pages.lower_bound(addr); it != g_pages.end() && it->first < addr + bytes;) {
    CUresult r = d.unmap(CUdeviceptr(it->first), memory::kExpandablePage);
    if (r == CUDA_SUCCESS) r = d.release(it->second);
    if (r != CUDA_SUCCESS) {
      std::lock_guard<std::mutex> e(g_free_mu);
      if (g_free_error.empty())
        g_free_error = detail::str("cuda: unmapping a page of an expandable segment failed: CUresult ", int(r));
    }
    it = g_pages.erase(it);
  }
}

}  // namespace

size_t vm_range(int device) {
  const int64_t total = properties(device).total_memory;
  const size_t page = memory::kExpandablePage, want = size_t(total) + size_t(total) / 8;
  return (want + page - 1) / page * page;
}

void* vm_reserve(int device, size_t bytes) {
  raise_free_error();
  DeviceGuard guard(device);
  const Driver& d = driver();
  size_t granularity = 0;
  const CUmemAllocationProp prop = page_properties(device);
  check_driver(d.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity");
  MG_CHECK(granularity && memory::kExpandablePage % granularity == 0, DeviceError, "cuda: expandable segments map ",
           memory::kExpandablePage, "-byte pages, which cuda:", device, "'s granularity of ", granularity,
           " bytes does not divide");
  CUdeviceptr p = 0;
  if (d.address_reserve(&p, bytes, memory::kExpandablePage, 0, 0) != CUDA_SUCCESS) return nullptr;
  return reinterpret_cast<void*>(p);
}

bool vm_map(int device, uintptr_t addr, size_t bytes) {
  raise_free_error();
  DeviceGuard guard(device);
  const Driver& d = driver();
  const CUmemAllocationProp prop = page_properties(device);
  const size_t page = memory::kExpandablePage;
  // Any failure unmaps what this call mapped so far: the allocator counts none of it as mapped.
  for (size_t at = 0; at < bytes; at += page) {
    CUmemGenericAllocationHandle h = 0;
    const CUresult r = d.create(&h, page, &prop, 0);
    if (r != CUDA_SUCCESS) drop_pages(addr, at);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return false;
    check_driver(r, "cuMemCreate");
    if (const CUresult m = d.map(CUdeviceptr(addr + at), page, 0, h, 0); m != CUDA_SUCCESS) {
      d.release(h);
      drop_pages(addr, at);
      check_driver(m, "cuMemMap");
    }
    std::lock_guard<std::mutex> g(g_pages_mu);
    g_pages[addr + at] = h;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (const CUresult r = d.set_access(CUdeviceptr(addr), bytes, &access, 1); r != CUDA_SUCCESS) {
    drop_pages(addr, bytes);
    check_driver(r, "cuMemSetAccess");
  }
  return true;
}

void vm_unmap(int device, void* stream, uintptr_t addr, size_t bytes) {
  int prev = device;
  (void)cudaGetDevice(&prev);
  (void)cudaSetDevice(device);
  // Unlike cudaFree, unmapping does not wait for the kernels that may still use the pages.
  (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  drop_pages(addr, bytes);
  (void)cudaSetDevice(prev);
}

void vm_release(int device, uintptr_t addr, size_t bytes) {
  int prev = device;
  (void)cudaGetDevice(&prev);
  (void)cudaSetDevice(device);
  drop_pages(addr, bytes);  // none are left when the allocator gives the range back
  if (driver().address_free(CUdeviceptr(addr), bytes) != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> g(g_free_mu);
    if (g_free_error.empty()) g_free_error = "cuda: cuMemAddressFree of an expandable segment failed";
  }
  (void)cudaSetDevice(prev);
}

void copy(void* dst, const void* src, size_t bytes, CopyKind kind, int device) {
  if (bytes == 0) return;
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                      : cudaMemcpyDeviceToDevice;
  cudaStream_t s = raw(stream_slot(device));
  check(cudaMemcpyAsync(dst, src, bytes, k, s), "cudaMemcpyAsync");
  if (kind != CopyKind::DeviceToDevice) check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

// ---- events for the allocator (never throw: they run inside release())

void* record_event(int device, void* stream) {
  int prev = 0;
  (void)cudaGetDevice(&prev);
  (void)cudaSetDevice(device);
  auto s = static_cast<cudaStream_t>(stream);
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess || cudaEventRecord(e, s) != cudaSuccess) {
    if (e) cudaEventDestroy(e);
    e = nullptr;
    (void)cudaGetLastError();
    (void)cudaStreamSynchronize(s);  // no event: wait now, so the block is free to reuse
  }
  (void)cudaSetDevice(prev);
  return e;
}

bool event_done(void* event, bool wait) {
  auto e = static_cast<cudaEvent_t>(event);
  cudaError_t r = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
  if (r == cudaErrorNotReady) return false;
  if (r != cudaSuccess) (void)cudaGetLastError();
  return true;
}

void destroy_event(void* event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

// ---- devices

DeviceProperties properties(int device) {
  device = resolve(device);
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  return {p.name, p.major, p.minor, p.multiProcessorCount, int64_t(p.totalGlobalMem)};
}

int current_device() {
  if (device_count() == 0) return 0;
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

void set_device(int device) { check(cudaSetDevice(resolve(device)), "cudaSetDevice"); }

void synchronize(int device) {
  device = resolve(device);
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// ---- streams

Stream Stream::create(int device) {
  device = resolve(device);
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return Stream(device, std::shared_ptr<void>(s, [device](void* h) {
                  int current = device;  // the deleter may run in a release(): keep the caller's device
                  cudaGetDevice(&current);
                  cudaSetDevice(device);
                  cudaStreamDestroy(static_cast<cudaStream_t>(h));
                  cudaSetDevice(current);
                }));
}

void Stream::synchronize() const {
  if (device_count() == 0) return;
  check(cudaSetDevice(device_), "cudaSetDevice");
  check(cudaStreamSynchronize(raw(*this)), "cudaStreamSynchronize");
}

bool Stream::query() const {
  if (device_count() == 0) return true;
  cudaError_t e = cudaStreamQuery(raw(*this));
  if (e == cudaErrorNotReady) return false;
  check(e, "cudaStreamQuery");
  return true;
}

Stream current_stream(int device) {
  if (device < 0) device = current_device();
  Stream s = stream_slot(device);
  if (s.is_default()) return Stream(device, nullptr);
  return s;
}

void set_current_stream(const Stream& s) {
  resolve(s.device());
  stream_slot(s.device()) = s;
}

StreamGuard::StreamGuard(const Stream& s) : prev_(current_stream(s.device())) { set_current_stream(s); }
StreamGuard::~StreamGuard() { stream_slot(prev_.device()) = prev_; }

// ---- events

Event::Event(bool timing) {
  device_ = resolve(-1);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  handle_ = std::shared_ptr<void>(e, [](void* h) { cudaEventDestroy(static_cast<cudaEvent_t>(h)); });
}

void Event::record(const Stream& s) {
  MG_CHECK(s.device() == device_, DeviceError, "Event::record: expected a stream on cuda:", device_,
           ", got one on cuda:", s.device());
  check(cudaEventRecord(static_cast<cudaEvent_t>(handle()), raw(s)), "cudaEventRecord");
}
void Event::synchronize() const {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(handle())), "cudaEventSynchronize");
}
bool Event::query() const {
  cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(handle()));
  if (e == cudaErrorNotReady) return false;
  check(e, "cudaEventQuery");
  return true;
}
void Event::wait(const Stream& s) const {
  check(cudaStreamWaitEvent(raw(s), static_cast<cudaEvent_t>(handle()), 0), "cudaStreamWaitEvent");
}
float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle()), static_cast<cudaEvent_t>(end.handle())),
        "cudaEventElapsedTime");
  return ms;
}

// ---- pinned memory and asynchronous copies

void* alloc_pinned(size_t bytes) {
  resolve(-1);
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault), "cudaHostAlloc");
  {
    std::lock_guard<std::mutex> g(g_pinned_mu);
    g_pinned.insert(p);
  }
  g_pinned_bytes += int64_t(bytes);
  return p;
}

void free_pinned(void* p, size_t bytes) {
  {
    std::lock_guard<std::mutex> g(g_pinned_mu);
    g_pinned.erase(p);
  }
  g_pinned_bytes -= int64_t(bytes);
  cudaFreeHost(p);
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  const size_t bytes = nbytes_of(shape, dtype);
  return from_blob(alloc_pinned(bytes), shape, TensorOptions(dtype), [bytes](void* q) { free_pinned(q, bytes); });
}

Tensor pin_memory(const Tensor& t) {
  MG_CHECK(t.device().is_cpu(), DeviceError, "pin_memory: expected a cpu tensor, got one on ", t.device());
  if (is_pinned(t)) return t;
  Tensor p = empty_pinned(t.shape(), t.dtype());
  p.copy_(t.detach());
  return p;
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) return false;
  std::lock_guard<std::mutex> g(g_pinned_mu);
  return g_pinned.count(t.storage()->data()) > 0;
}

int64_t pinned_bytes() { return g_pinned_bytes; }

void copy_async(const Tensor& dst, const Tensor& src) {
  MG_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), ValueError,
           "copy_async: expected the same shape and dtype, got ", shape_str(dst.shape()), " ", dst.dtype(), " and ",
           shape_str(src.shape()), " ", src.dtype());
  MG_CHECK(dst.is_contiguous() && src.is_contiguous(), ValueError, "copy_async: expected contiguous tensors");
  MG_CHECK(dst.device().is_cuda() || src.device().is_cuda(), DeviceError, "copy_async: expected one side on cuda, got ",
           src.device(), " -> ", dst.device());
  MG_CHECK(!dst.is_meta() && !src.is_meta(), MetaTensorError, "copy_async: meta tensors have no bytes");
  const Device& d = dst.device().is_cuda() ? dst.device() : src.device();
  check_device_usable(d);
  auto addr = [](const Tensor& t) {
    return static_cast<char*>(t.storage()->data()) + t.storage_offset() * int64_t(t.element_size());
  };
  cudaMemcpyKind k = src.device().is_cpu()   ? cudaMemcpyHostToDevice
                     : dst.device().is_cpu() ? cudaMemcpyDeviceToHost
                                             : cudaMemcpyDeviceToDevice;
  check(cudaSetDevice(d.index), "cudaSetDevice");
  check(cudaMemcpyAsync(addr(dst), addr(src), dst.nbytes(), k, raw(stream_slot(d.index))), "cudaMemcpyAsync");
  dst.storage()->bump_version();
}

DeviceMemory device_memory(int device) {
  device = resolve(device);
  check(cudaSetDevice(device), "cudaSetDevice");
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  DeviceMemory m;
  m.total = int64_t(total_b);
  m.free = int64_t(free_b);
  m.used = m.total - m.free;
  m.memgrad_reserved = memory_stats(cuda_device(device)).reserved;
  m.outside_memgrad = m.used - m.memgrad_reserved;
  return m;
}

}  // namespace mg::cuda
