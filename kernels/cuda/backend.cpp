// The CUDA kernel table. Without MG_CUDA it stays empty and ops on cuda tensors raise
// (allocation already says why: not built / no device).
#include <memgrad/kernels/backend.h>
#ifdef MG_WITH_CUDA
#include <memgrad/kernels/cuda/cuda_kernels.h>
#endif

namespace mg::kernels {

const Backend& cuda_backend() {
  static const Backend b = [] {
    Backend k;
#ifdef MG_WITH_CUDA
#define MG_KERNEL(name, ...) k.name = cuda::name;
#define MG_OPTIONAL_KERNEL MG_KERNEL
#include <memgrad/kernels/kernel_list.h>
#endif
    return k;
  }();
  return b;
}

}  // namespace mg::kernels
