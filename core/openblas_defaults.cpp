// Part of libmemgrad_omp_defaults, which loads before the libraries it configures (see
// core/omp_defaults.cpp): makes OpenBLAS and oneDNN run the kernels of the CPU's vector ISA level
// (core/cpu_isa.h), which both read from the environment once, when they load or first run.
//
// Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) chooses its kernels by CPU family and model, and CPUs
// newer than its tables get older kernels: generic SSE3 ("Prescott", about 25 GFLOP/s) on an Intel
// Xeon family 6 model 207 with AVX-512, AVX2 ("Haswell", half of SkylakeX's speed) on an AMD family
// 26 with AVX-512. The level says which kernels can run: SkylakeX needs AVX-512 F/CD/BW/DQ/VL,
// Haswell AVX2 and FMA. oneDNN dispatches on the ISA itself, so it needs a word only when MG_CPU_ISA
// lowers the level. A value the user set wins; kernels/cpu/gemm.cpp checks what each
// library ended up running and keeps matmul's "auto" off one that runs below the CPU.
#include <memgrad/core/cpu_isa_impl.h>

namespace {

__attribute__((constructor)) void choose_blas_kernels() {
  using mg::CpuIsa;
  const CpuIsa isa = mg::detail::effective_cpu_isa(), detected = mg::detail::detected_cpu_isa();
  // At the baseline OpenBLAS's own choice is as good as any, unless MG_CPU_ISA asks for the baseline.
  const char* core = isa == CpuIsa::AVX512 ? "SkylakeX" : isa == CpuIsa::AVX2 ? "Haswell" : nullptr;
  if (!core && isa < detected) core = "Prescott";
  if (core) setenv("OPENBLAS_CORETYPE", core, 0);
  if (isa < detected) setenv("ONEDNN_MAX_CPU_ISA", isa == CpuIsa::AVX2 ? "AVX2" : "SSE41", 0);
}

}  // namespace
