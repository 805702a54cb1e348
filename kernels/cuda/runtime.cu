#include <cuda_runtime.h>

#include <memgrad/core/error.h>
#include <memgrad/kernels/cuda/runtime.h>

namespace mg::cuda {
namespace {
std::string g_last_error;
void check(cudaError_t e, const char* what) {
  MG_CHECK(e == cudaSuccess, DeviceError, "cuda: ", what, " failed: ", cudaGetErrorString(e));
}
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
  check(cudaSetDevice(device), "cudaSetDevice");
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

void free(int device, void* p) {
  if (!p) return;
  cudaSetDevice(device);
  cudaFree(p);
}

void copy(void* dst, const void* src, size_t bytes, CopyKind kind, int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                      : cudaMemcpyDeviceToDevice;
  check(cudaMemcpy(dst, src, bytes, k), "cudaMemcpy");
}

}  // namespace mg::cuda
