// One ISA level's CPU kernels as Backend tables (compiled per level, kernels/cpu/cpu_kernels.h). A level
// above the baseline compiles only the kernel families that gain from its ISA (CMakeLists.txt,
// MG_CPU_BASELINE_FAMILIES): its tables start as the level's below (MG_CPU_TABLE_BELOW: avx2 under
// avx512, or the baseline where the build left avx2 out) and take this level's own kernels, those its
// objects define. They are declared weak here, so the others' addresses are null.
#include <memgrad/kernels/cpu/cpu_kernels.h>

#ifdef MG_CPU_ISA_BELOW  // a level above the baseline (CMakeLists.txt)
#define MG_CPU_LEVEL_ABOVE 1
#ifndef MG_CPU_TABLE_BELOW
#error "a level above the baseline is compiled with MG_CPU_TABLE_BELOW, the level its tables start from"
#endif
// Weak: a build may leave that level out (MG_CPU_LEVELS=host), and then its address is null and the
// tables start from the baseline's. (Not a definition per build: the level's flags stay the same.)
namespace mg::cpu::MG_CPU_TABLE_BELOW {
__attribute__((weak)) const kernels::Backend& table();
__attribute__((weak)) const kernels::Backend& scratch_table();
}  // namespace mg::cpu::MG_CPU_TABLE_BELOW
namespace mg::cpu::baseline {
const kernels::Backend& table();
const kernels::Backend& scratch_table();
}  // namespace mg::cpu::baseline

namespace mg::cpu::MG_CPU_ISA_NS {
#define MG_KERNEL(name, ret, ...) __attribute__((weak)) ret name(__VA_ARGS__);
#define MG_OPTIONAL_KERNEL(name, ret, ...)
#define MG_SCRATCH(name) __attribute__((weak)) ScratchOf<decltype(name)> name##_scratch;
#include <memgrad/kernels/kernel_list.h>
}  // namespace mg::cpu::MG_CPU_ISA_NS
#else
#define MG_CPU_LEVEL_ABOVE 0
#endif

namespace mg::cpu::MG_CPU_ISA_NS {

const Backend& table() {
  static const Backend b = [] {
#if MG_CPU_LEVEL_ABOVE
    Backend k = MG_CPU_TABLE_BELOW::table ? MG_CPU_TABLE_BELOW::table() : baseline::table();
#define MG_KERNEL(name, ...) \
  if (name) k.name = name;
#else
    Backend k;
#define MG_KERNEL(name, ...) k.name = name;
#endif
#define MG_OPTIONAL_KERNEL(name, ...)
#include <memgrad/kernels/kernel_list.h>
    return k;
  }();
  return b;
}

const Backend& scratch_table() {
  static const Backend b = [] {
#if MG_CPU_LEVEL_ABOVE
    Backend k = MG_CPU_TABLE_BELOW::scratch_table ? MG_CPU_TABLE_BELOW::scratch_table() : baseline::scratch_table();
#define MG_SCRATCH(name) \
  if (name##_scratch) k.name = &ScratchOnly<&name##_scratch>::run;
#else
    Backend k;
#define MG_SCRATCH(name) k.name = &ScratchOnly<&name##_scratch>::run;
#endif
#define MG_KERNEL(name, ...)
#include <memgrad/kernels/kernel_list.h>
    return k;
  }();
  return b;
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
