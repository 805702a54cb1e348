// Built when MG_CUDA is OFF: the cuda device type exists, and using it says why it can't.
#include <memgrad/core/error.h>
#include <memgrad/kernels/cuda/runtime.h>

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
void copy(void*, const void*, size_t, CopyKind, int) { unbuilt(); }
}  // namespace mg::cuda
