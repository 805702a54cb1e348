// The CUDA kernel table, and its scratch table. Without MG_CUDA the kernel table stays empty and ops
// on cuda tensors raise (allocation already says why: not built / no device); the scratch table is
// there either way (scratch.cpp builds without nvcc), so plans for cuda can be made anywhere.
#include <memgrad/kernels/cuda/cuda_kernels.h>

namespace mg::kernels {

const Backend& cuda_backend() {
  static const Backend b = [] {
    Backend k;
#ifdef MG_WITH_CUDA
#define MG_KERNEL(name, ...) k.name = cuda::name;
#include <memgrad/kernels/kernel_list.h>
#endif
    return k;
  }();
  return b;
}

const Backend& cuda_scratch() {
  static const Backend b = [] {
    Backend k;
#define MG_KERNEL(name, ...)
#define MG_SCRATCH(name) k.name = &ScratchOnly<&cuda::name##_scratch>::run;
#include <memgrad/kernels/kernel_list.h>
    return k;
  }();
  return b;
}

}  // namespace mg::kernels
