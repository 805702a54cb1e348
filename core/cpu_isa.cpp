#include <memgrad/core/cpu_isa.h>
#include <memgrad/core/cpu_isa_impl.h>

namespace mg {

CpuIsa cpu_isa() {
  static const CpuIsa isa = detail::effective_cpu_isa();
  return isa;
}

CpuIsa cpu_kernels_isa() {
#ifdef MG_CPU_DISPATCH
  return cpu_isa();
#else
  return detail::compiled_cpu_isa();  // this file is compiled with the kernels' flags
#endif
}

}  // namespace mg
