// The hazard tests/compiler/check_isa_code.py guards against, built on purpose (the ctest isa_code_leak,
// expected to fail the check): this file is compiled twice into one library, once for x86-64-v3 and
// linked first, once for the baseline. The linker keeps the first copy of the inline function
// `total`, compiled with AVX2, and the baseline's `baseline_total` calls it: on a CPU without AVX2
// that call would fault. (memgrad's own levels are linked from the lowest up, which rules this out.)
#include <cstddef>

#ifndef ISA_LEAK_NAME
#error "define ISA_LEAK_NAME"
#endif

__attribute__((noinline)) inline float total(const float* x, size_t n) {
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += x[i] * x[i];  // VEX-encoded under x86-64-v3
  return s;
}

float ISA_LEAK_NAME(const float* x, size_t n) { return total(x, n); }
