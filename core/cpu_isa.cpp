#include <memgrad/core/cpu_isa.h>
#include <memgrad/core/cpu_isa_impl.h>

namespace mg {

CpuIsa cpu_isa() {
  static const CpuIsa isa = detail::effective_cpu_isa();
  return isa;
}

}  // namespace mg
