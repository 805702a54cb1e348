// A level's code compiled without its ISA, built on purpose (the ctest isa_code_narrow, expected to
// fail tests/compiler/check_isa_code.py --levels avx2): a function of mg::cpu::avx2 compiled for the
// baseline holds no VEX instruction, as a build that lost a level's -march flags would make it.
#include <cstddef>

namespace mg::cpu::avx2 {

float total(const float* x, size_t n) {
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += x[i] * x[i];  // SSE code at the baseline
  return s;
}

}  // namespace mg::cpu::avx2
