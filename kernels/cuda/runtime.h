// The thin CUDA runtime layer the core calls. Without MG_CUDA every call reports that
// memgrad was built without CUDA; with it, a failing device query means "no GPU".
// The public device API (streams, events, pinned memory) is core/cuda.h.
#pragma once
#include <cstddef>
#include <string>

namespace mg::cuda {
bool built();
int device_count();
std::string last_error();                // why device_count() is 0
void* malloc(int device, size_t bytes);  // null when the device is out of memory
void free(int device, void* p);
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
// Copies on the current stream of `device` and returns when the bytes have arrived.
void copy(void* dst, const void* src, size_t bytes, CopyKind kind, int device);
}  // namespace mg::cuda
