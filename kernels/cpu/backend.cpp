// The CPU's kernel table: the one of the ISA level its kernels run at (core/cpu_isa.h), among the
// levels this build compiled them for (kernels/cpu/cpu_kernels.h).
#include <memgrad/core/cpu_isa.h>
#include <memgrad/kernels/backend.h>

namespace mg::cpu {
#define MG_CPU_LEVEL(ns)                                                    \
  namespace ns {                                                            \
  const kernels::Backend& table();                                          \
  void matmul_scratch(const Tensor& a, const Tensor& b, const Tensor& out); \
  }
#ifdef MG_CPU_DISPATCH
MG_CPU_LEVEL(baseline)
MG_CPU_LEVEL(avx2)
MG_CPU_LEVEL(avx512)
namespace scratch_level = baseline;  // scratch is the same at every level
#else
MG_CPU_LEVEL(MG_CPU_ISA_NS)
namespace scratch_level = MG_CPU_ISA_NS;
#endif
#undef MG_CPU_LEVEL
}  // namespace mg::cpu

namespace mg::kernels {

const Backend& cpu_backend() {
#ifdef MG_CPU_DISPATCH
  static const Backend& b = cpu_kernels_isa() == CpuIsa::AVX512 ? cpu::avx512::table()
                            : cpu_kernels_isa() == CpuIsa::AVX2 ? cpu::avx2::table()
                                                                : cpu::baseline::table();
#else
  static const Backend& b = cpu::MG_CPU_ISA_NS::table();
#endif
  return b;
}

const Backend& cpu_scratch() {
  static const Backend b = [] {
    Backend k;
    k.matmul = cpu::scratch_level::matmul_scratch;
    return k;
  }();
  return b;
}

}  // namespace mg::kernels
