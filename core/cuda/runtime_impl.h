// The thin CUDA runtime layer the core calls. Without MG_CUDA every call reports that
// memgrad was built without CUDA; with it, a failing device query means "no GPU".
// The public device API (streams, events, pinned memory) is core/cuda.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mg::cuda {
bool built();
int device_count();
std::string last_error();  // why device_count() is 0
// Both leave the caller's current device as it was.
void* malloc(int device, size_t bytes);  // null when the device is out of memory
// Never throws (it runs inside release()): a failing cudaFree is raised as DeviceError by the next malloc.
void free(int device, void* p);
// Virtual memory for expandable segments (the allocator's cpu twin is mmap): the address range a
// segment of `device` reserves (its memory and an eighth); a range of `bytes` reserved, aligned to
// memory::kExpandablePage (null when refused); pages of that size mapped in it, read-write for
// `device` (false when the device is out of memory; nothing mapped then); pages unmapped and
// released once the work queued on `stream` is done; the range given back. Sizes are multiples of
// the page. vm_unmap and vm_release never throw (they run inside release()): a failure is raised as
// DeviceError by the next malloc, reserve or map.
size_t vm_range(int device);
void* vm_reserve(int device, size_t bytes);
bool vm_map(int device, uintptr_t addr, size_t bytes);
void vm_unmap(int device, void* stream, uintptr_t addr, size_t bytes);
void vm_release(int device, uintptr_t addr, size_t bytes);
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
// Copies on the current stream of `device` and returns when the bytes have arrived.
void copy(void* dst, const void* src, size_t bytes, CopyKind kind, int device);
// Events for the caching allocator's deferred frees (cudaEvent_t handles; `stream` is a
// cudaStream_t, null for the legacy stream). They never throw, as they run inside release():
// record_event returns null when it cannot record (it synchronises the stream instead, so the
// block is safe to reuse at once), and an event whose query fails counts as done.
void* record_event(int device, void* stream);
bool event_done(void* event, bool wait);  // with `wait`, first blocks until the event completes
void destroy_event(void* event);
// Page-locked host bytes (empty_pinned's, and a HostMemoryScope's for cuda), counted in pinned_bytes()
// and known to is_pinned() until free_pinned. DeviceError when they cannot be had.
void* alloc_pinned(size_t bytes);
void free_pinned(void* p, size_t bytes);  // bytes: as given to alloc_pinned
}  // namespace mg::cuda
