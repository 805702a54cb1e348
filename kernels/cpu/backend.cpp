// The CPU's kernel tables: those of the ISA level its kernels run at (core/cpu_isa.h), among the
// levels this build compiled them for (kernels/cpu/cpu_kernels.h).
#include <memgrad/core/cpu_isa.h>
#include <memgrad/kernels/backend.h>

namespace mg::cpu {
#define MG_CPU_LEVEL(ns)                   \
  namespace ns {                           \
  const kernels::Backend& table();         \
  const kernels::Backend& scratch_table(); \
  }
#ifdef MG_CPU_DISPATCH
MG_CPU_LEVEL(baseline)
MG_CPU_LEVEL(avx2)
MG_CPU_LEVEL(avx512)
#else
MG_CPU_LEVEL(MG_CPU_ISA_NS)
#endif
#undef MG_CPU_LEVEL

namespace {
// The copy of one table (table() or scratch_table()) that the CPU's level has.
template <const kernels::Backend& (*Baseline)(), const kernels::Backend& (*Avx2)(), const kernels::Backend& (*Avx512)()>
const kernels::Backend& pick() {
  const CpuIsa isa = cpu_kernels_isa();
  return isa == CpuIsa::AVX512 ? Avx512() : isa == CpuIsa::AVX2 ? Avx2() : Baseline();
}
}  // namespace
}  // namespace mg::cpu

namespace mg::kernels {

#ifdef MG_CPU_DISPATCH
const Backend& cpu_backend() {
  static const Backend& b = cpu::pick<cpu::baseline::table, cpu::avx2::table, cpu::avx512::table>();
  return b;
}
const Backend& cpu_scratch() {
  static const Backend& b =
      cpu::pick<cpu::baseline::scratch_table, cpu::avx2::scratch_table, cpu::avx512::scratch_table>();
  return b;
}
#else
const Backend& cpu_backend() { return cpu::MG_CPU_ISA_NS::table(); }
const Backend& cpu_scratch() { return cpu::MG_CPU_ISA_NS::scratch_table(); }
#endif

}  // namespace mg::kernels
