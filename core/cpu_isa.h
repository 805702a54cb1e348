// The vector instruction set memgrad's CPU code uses on this machine: the widest level the CPU and
// its operating system support (cpuid and xgetbv, read once), lowered by MG_CPU_ISA when set (for
// example MG_CPU_ISA=avx2 on an AVX-512 machine runs every AVX2 path, as an AVX2 CPU would: memgrad's
// kernels, OpenBLAS's and oneDNN's). The levels are x86-64's microarchitecture levels as far as
// vectors go; on other architectures the answer is Baseline.
#pragma once

namespace mg {

enum class CpuIsa {
  Baseline,  // x86-64 (SSE2): what a default build's code may assume on any x86-64 CPU
  AVX2,      // x86-64-v3: AVX, AVX2, FMA, BMI1/2, F16C, MOVBE
  AVX512,    // x86-64-v4: v3 plus AVX-512 F, CD, BW, DQ, VL
};

CpuIsa cpu_isa();

// The level memgrad's own CPU kernels run at. A default build compiles them for every level and runs
// those of cpu_isa(); one with MG_CPU_LEVELS=host for the baseline and its machine's level, and runs the
// highest of those up to cpu_isa(); one with MG_NATIVE compiles them once, for the machine that built it.
CpuIsa cpu_kernels_isa();

// "baseline", "avx2", "avx512": MG_CPU_ISA's spelling.
constexpr const char* to_string(CpuIsa isa) {
  return isa == CpuIsa::AVX512 ? "avx512" : isa == CpuIsa::AVX2 ? "avx2" : "baseline";
}

}  // namespace mg
