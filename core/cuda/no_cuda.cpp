// Built when MG_CUDA is OFF: the cuda device type exists, and using it says why it can't.
#include <memgrad/core/cuda.h>
#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/error.h>

namespace mg::cuda {
namespace {
[[noreturn]] void unbuilt() {
  throw DeviceError("cuda: memgrad was built without CUDA (configure with -DMG_CUDA=ON and nvcc on PATH)");
}
}  // namespace
bool built() { return false; }
int device_count() { return 0; }
std::string last_error() { return "memgrad was built without CUDA"; }
void* malloc(int, size_t) { unbuilt(); }
void free(int, void*) {}
size_t vm_range(int) { unbuilt(); }
void* vm_reserve(int, size_t) { unbuilt(); }
bool vm_map(int, uintptr_t, size_t) { unbuilt(); }
void vm_unmap(int, void*, uintptr_t, size_t) {}
void vm_release(int, uintptr_t, size_t) {}
void copy(void*, const void*, size_t, CopyKind, int) { unbuilt(); }
void* record_event(int, void*) { return nullptr; }  // no cuda blocks exist: never called with one
bool event_done(void*, bool) { return true; }
void destroy_event(void*) {}

DeviceProperties properties(int) { unbuilt(); }
int current_device() { return 0; }
void set_device(int) { unbuilt(); }
void synchronize(int) { unbuilt(); }
Stream Stream::create(int) { unbuilt(); }
void Stream::synchronize() const {}
bool Stream::query() const { return true; }
Stream current_stream(int) { return Stream(); }
void set_current_stream(const Stream&) { unbuilt(); }
StreamGuard::StreamGuard(const Stream&) { unbuilt(); }
StreamGuard::~StreamGuard() = default;
Event::Event(bool) {}
void Event::record(const Stream&) { unbuilt(); }
void Event::synchronize() const {}
bool Event::query() const { return true; }
void Event::wait(const Stream&) const { unbuilt(); }
float Event::elapsed_ms(const Event&) const { unbuilt(); }
void* alloc_pinned(size_t) { unbuilt(); }
void free_pinned(void*, size_t) {}
Tensor empty_pinned(const Shape&, DType) { unbuilt(); }
Tensor pin_memory(const Tensor&) { unbuilt(); }
bool is_pinned(const Tensor&) { return false; }
int64_t pinned_bytes() { return 0; }
void copy_async(const Tensor&, const Tensor&) { unbuilt(); }
DeviceMemory device_memory(int) { unbuilt(); }
}  // namespace mg::cuda
