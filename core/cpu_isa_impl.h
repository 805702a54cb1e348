// Detecting the CPU's vector ISA level (core/cpu_isa.h), shared by libmemgrad and by the library
// that sets the process's defaults before the BLAS libraries load (core/openblas_defaults.cpp).
// Private; static, so each library keeps its own copy.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>

#include <memgrad/core/cpu_isa.h>
#include <memgrad/core/env.h>

namespace mg::detail {

// The widest level the CPU and its OS support. __builtin_cpu_supports answers for the OS too: it
// reports AVX and AVX-512 only where xgetbv says the OS saves their registers. (x86-64-v3 also has
// F16C, LZCNT and MOVBE, which every CPU with AVX2, FMA and BMI2 has.)
static inline CpuIsa detected_cpu_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                  __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                  __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  return v4 ? CpuIsa::AVX512 : v3 ? CpuIsa::AVX2 : CpuIsa::Baseline;
#else
  return CpuIsa::Baseline;
#endif
}

// The level MG_CPU_ISA names ("baseline", "avx2", "avx512"), or nullopt for another value.
static inline std::optional<CpuIsa> parse_cpu_isa(const std::string& value) {
  for (CpuIsa level : {CpuIsa::Baseline, CpuIsa::AVX2, CpuIsa::AVX512})
    if (value == to_string(level)) return level;
  return std::nullopt;
}
inline const char* const kCpuIsaExpected = "expected baseline, avx2 or avx512";

// detected_cpu_isa(), lowered to MG_CPU_ISA ("baseline", "avx2", "avx512") when that is set and lower.
// A value that names no level is reported on stderr (once per library: core/env.h) and ignored.
static inline CpuIsa effective_cpu_isa() {
  const CpuIsa detected = detected_cpu_isa();
  const char* cap = std::getenv("MG_CPU_ISA");
  if (!cap || !*cap) return detected;
  if (const std::optional<CpuIsa> level = parse_cpu_isa(cap)) return *level < detected ? *level : detected;
  env::warn_ignored(env::message("MG_CPU_ISA", cap, kCpuIsaExpected));
  return detected;
}

// The level memgrad's CPU kernels run at when the CPU (or MG_CPU_ISA) asks for `want` and the build
// compiled them for the baseline and some of the levels above it (CMakeLists.txt, MG_CPU_LEVELS=host):
// `want` where it was compiled, else the highest compiled level below it. The baseline always is.
constexpr CpuIsa highest_built_level(CpuIsa want, bool avx2_built, bool avx512_built) {
  if (want == CpuIsa::AVX512 && avx512_built) return CpuIsa::AVX512;
  if (want >= CpuIsa::AVX2 && avx2_built) return CpuIsa::AVX2;
  return CpuIsa::Baseline;
}

// The level the including file is compiled for (its -march).
constexpr CpuIsa compiled_cpu_isa() {
#if defined(__AVX512F__) && defined(__AVX512CD__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
  return CpuIsa::AVX512;
#elif defined(__AVX2__) && defined(__FMA__) && defined(__BMI2__)
  return CpuIsa::AVX2;
#else
  return CpuIsa::Baseline;
#endif
}

}  // namespace mg::detail
