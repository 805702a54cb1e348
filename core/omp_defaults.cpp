// libmemgrad_omp_defaults: bounds how long libgomp's idle threads spin before they sleep.
//
// libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its own initializer, before any code of
// libmemgrad runs. With neither set, a thread that waits for work (between parallel regions, at a
// barrier) spins about 300,000 times, milliseconds, before it sleeps: on a shared machine those
// threads take the cores from the threads doing the work (a training step took 4x its CPU time).
// This is its own small library, listed after libgomp among libmemgrad's dependencies: the dynamic
// loader initializes the objects it loaded last first (dependencies aside), so this runs before
// libgomp reads the environment (tests/CMakeLists.txt checks that it does). What a user set wins.
#include <cstdlib>

namespace {

// Tens of microseconds: libgomp's own spin count when it knows its threads outnumber the cores. A
// thread still catches a parallel region that follows the last one closely (the next op of a busy
// step) without sleeping; under load it yields its core soon (bench/RESULTS.md, issue 18).
constexpr const char* kSpinCount = "1000";

__attribute__((constructor)) void bound_openmp_spin() {
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) setenv("GOMP_SPINCOUNT", kSpinCount, 0);
}

}  // namespace
