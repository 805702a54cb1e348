// What the emulator's halves share: the scheduler (emulated_device.cpp: fibers, collectives) and the
// memory checks (emulated_memory.cpp: allocations, the shared arena, the instrumentation hooks).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "emulated_device.h"

namespace emu::detail {

enum class Access : uint8_t { Read, Write, Atomic };

// The thread whose kernel code runs, while its accesses are checked.
struct ThreadInfo {
  uint3 index;
  unsigned linear = 0, warp = 0;
  const char *stack_lo = nullptr, *stack_hi = nullptr;  // its own stack: registers and local memory
};
// Non-null while an armed thread runs (checked by the hooks before anything else).
extern const ThreadInfo* g_checked;
// Suspends the checks while the emulator's own code runs on a kernel's behalf: its containers'
// code may be instrumented copies (one definition of each inline function is kept per program).
struct Unchecked {
  const ThreadInfo* saved = g_checked;
  Unchecked() { g_checked = nullptr; }
  ~Unchecked() { g_checked = saved; }
  Unchecked(const Unchecked&) = delete;
  Unchecked& operator=(const Unchecked&) = delete;
};

// "kernel_name<float>, block (1,0,0), thread (3,0,0)" for the current thread.
std::string where();
// Records a finding of `check` (memcheck, racecheck, initcheck, synccheck); the launch raises them.
void report(const char* check, const std::string& message);

// From the scheduler to the memory side.
void shared_begin_block(size_t dynamic_bytes);  // poisons the arena, forgets the static arrays
void shared_barrier();                          // a __syncthreads completed: a new barrier interval
void shared_warp_sync(unsigned warp);           // a __syncwarp completed in `warp`
void set_warps(unsigned warps);                 // threads of the launch's blocks / 32

// The checks of one access of `bytes` at `p` by the current thread.
void check_access(const void* p, size_t bytes, Access kind);

}  // namespace emu::detail
