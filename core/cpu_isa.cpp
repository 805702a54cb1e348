#include <cstdio>

#include <memgrad/core/cpu_isa.h>
#include <memgrad/core/cpu_isa_impl.h>

namespace mg {

CpuIsa cpu_isa() {
  static const CpuIsa isa = detail::effective_cpu_isa();
  return isa;
}

CpuIsa cpu_kernels_isa() {
#ifdef MG_CPU_DISPATCH
  // cpu_isa(), or the highest level below it that this build has (a build for its own CPU's level,
  // MG_CPU_LEVELS=host, run elsewhere or with MG_CPU_ISA lowered): said once on stderr. CMakeLists.txt
  // defines MG_CPU_HAS_<LEVEL> (0 or 1) for this file and kernels/cpu/backend.cpp.
  static const CpuIsa isa = [] {
    const CpuIsa want = cpu_isa();
    const CpuIsa built = detail::highest_built_level(want, MG_CPU_HAS_AVX2, MG_CPU_HAS_AVX512);
    if (built != want)
      std::fprintf(stderr,
                   "memgrad: this build has no %s copy of the CPU kernels (MG_CPU_LEVELS=host): they run at %s\n",
                   to_string(want), to_string(built));
    return built;
  }();
  return isa;
#else
  return detail::compiled_cpu_isa();  // this file is compiled with the kernels' flags
#endif
}

}  // namespace mg
