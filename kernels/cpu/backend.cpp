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
// The levels this build compiled (CMakeLists.txt, MG_CPU_LEVELS; all unless told): cpu_kernels_isa()
// names one of them. A level left out has no table, and null stands for it here.
#if !defined(MG_CPU_HAS_AVX2) || !defined(MG_CPU_HAS_AVX512)
#error "CMakeLists.txt defines MG_CPU_HAS_AVX2 and MG_CPU_HAS_AVX512 (0 or 1) for this file"
#endif
MG_CPU_LEVEL(baseline)
#if MG_CPU_HAS_AVX2
MG_CPU_LEVEL(avx2)
#define MG_CPU_AVX2(name) cpu::avx2::name
#else
#define MG_CPU_AVX2(name) nullptr
#endif
#if MG_CPU_HAS_AVX512
MG_CPU_LEVEL(avx512)
#define MG_CPU_AVX512(name) cpu::avx512::name
#else
#define MG_CPU_AVX512(name) nullptr
#endif
#else
MG_CPU_LEVEL(MG_CPU_ISA_NS)
#endif
#undef MG_CPU_LEVEL

#ifdef MG_CPU_DISPATCH
namespace {
// The copy of one table (table() or scratch_table()) that the CPU's level has: null for a level this
// build left out, which cpu_kernels_isa() never names.
using TableFn = const kernels::Backend& (*)();
const kernels::Backend& pick(TableFn baseline, TableFn avx2, TableFn avx512) {
  const CpuIsa isa = cpu_kernels_isa();
  return isa == CpuIsa::AVX512 ? avx512() : isa == CpuIsa::AVX2 ? avx2() : baseline();
}
}  // namespace
#endif
}  // namespace mg::cpu

namespace mg::kernels {

#ifdef MG_CPU_DISPATCH
const Backend& cpu_backend() {
  static const Backend& b = cpu::pick(cpu::baseline::table, MG_CPU_AVX2(table), MG_CPU_AVX512(table));
  return b;
}
const Backend& cpu_scratch() {
  static const Backend& b =
      cpu::pick(cpu::baseline::scratch_table, MG_CPU_AVX2(scratch_table), MG_CPU_AVX512(scratch_table));
  return b;
}
#else
const Backend& cpu_backend() { return cpu::MG_CPU_ISA_NS::table(); }
const Backend& cpu_scratch() { return cpu::MG_CPU_ISA_NS::scratch_table(); }
#endif

}  // namespace mg::kernels
