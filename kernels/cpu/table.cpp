// One ISA level's CPU kernels as Backend tables (compiled per level, kernels/cpu/cpu_kernels.h). A level
// above the baseline compiles only the kernel families that gain from its ISA (CMakeLists.txt,
// MG_CPU_BASELINE_FAMILIES): its tables start as the level's below (avx2 under avx512, the baseline
// under avx2) and take this level's own kernels, those its objects define. They are declared weak here,
// so the others' addresses are null.
#include <string_view>

#include <memgrad/kernels/cpu/cpu_kernels.h>

#ifdef MG_CPU_ISA_BELOW  // a level above the baseline (CMakeLists.txt)
#define MG_CPU_LEVEL_ABOVE 1
namespace mg::cpu {
#define MG_CPU_LEVEL_TABLES(ns)            \
  namespace ns {                           \
  const kernels::Backend& table();         \
  const kernels::Backend& scratch_table(); \
  }
MG_CPU_LEVEL_TABLES(baseline)
MG_CPU_LEVEL_TABLES(avx2)
#undef MG_CPU_LEVEL_TABLES
}  // namespace mg::cpu

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

namespace {
#define MG_CPU_NAME(ns) MG_CPU_NAME_(ns)
#define MG_CPU_NAME_(ns) #ns
[[maybe_unused]] constexpr bool kAboveAvx2 = std::string_view(MG_CPU_NAME(MG_CPU_ISA_NS)) == "avx512";
#undef MG_CPU_NAME
#undef MG_CPU_NAME_
}  // namespace

const Backend& table() {
  static const Backend b = [] {
#if MG_CPU_LEVEL_ABOVE
    Backend k = kAboveAvx2 ? avx2::table() : baseline::table();
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
    Backend k = kAboveAvx2 ? avx2::scratch_table() : baseline::scratch_table();
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
