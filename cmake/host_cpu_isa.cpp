// Prints the ISA level of the CPU that configures the build ("baseline", "avx2", "avx512"), detected as
// libmemgrad detects it (core/cpu_isa_impl.h), MG_CPU_ISA aside: CMakeLists.txt's MG_CPU_LEVELS=host.
#include <cstdio>

#include <memgrad/core/cpu_isa_impl.h>

int main() {
  std::printf("%s", mg::to_string(mg::detail::detected_cpu_isa()));
  return 0;
}
