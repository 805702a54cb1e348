// One ISA level's CPU kernels as Backend tables (compiled per level, kernels/cpu/cpu_kernels.h).
#include <memgrad/kernels/cpu/cpu_kernels.h>

namespace mg::cpu::MG_CPU_ISA_NS {

const Backend& table() {
  static const Backend b = [] {
    Backend k;
#define MG_KERNEL(name, ...) k.name = name;
#define MG_OPTIONAL_KERNEL(name, ...)
#include <memgrad/kernels/kernel_list.h>
    return k;
  }();
  return b;
}

const Backend& scratch_table() {
  static const Backend b = [] {
    Backend k;
#define MG_KERNEL(name, ...)
#define MG_SCRATCH(name) k.name = &ScratchOnly<&name##_scratch>::run;
#include <memgrad/kernels/kernel_list.h>
    return k;
  }();
  return b;
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
