#include <memgrad/kernels/cpu/cpu_kernels.h>

namespace mg::kernels {

const Backend& cpu_backend() {
  static const Backend b = [] {
    Backend k;
#define MG_KERNEL(name, ...) k.name = cpu::name;
#define MG_OPTIONAL_KERNEL(name, ...)
#include <memgrad/kernels/kernel_list.h>
    return k;
  }();
  return b;
}

const Backend& cpu_scratch() {
  static const Backend b = [] {
    Backend k;
#define MG_KERNEL(name, ...)
#define MG_SCRATCH(name) k.name = &ScratchOnly<&cpu::name##_scratch>::run;
#include <memgrad/kernels/kernel_list.h>
    return k;
  }();
  return b;
}

}  // namespace mg::kernels
