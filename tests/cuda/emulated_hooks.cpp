// Where the kernels' memory accesses reach the checks: the entry points that access instrumentation
// calls (tests/CMakeLists.txt compiles the emulated tests with it), and the atomics. Each hook costs
// a test of g_checked outside a kernel's own code (the tests' host code is instrumented too).
// Built without instrumentation.
#include "emulated_internal.h"

using emu::detail::Access;
using emu::detail::check_access;
using emu::detail::g_checked;

// ---- ThreadSanitizer's calls (GCC and clang, -fsanitize=thread; no ThreadSanitizer runtime is linked)
#define EMU_TSAN_ACCESS(n)                            \
  void __tsan_read##n(void* p) {                      \
    if (g_checked) check_access(p, n, Access::Read);  \
  }                                                   \
  void __tsan_write##n(void* p) {                     \
    if (g_checked) check_access(p, n, Access::Write); \
  }                                                   \
  void __tsan_unaligned_read##n(void* p) {            \
    if (g_checked) check_access(p, n, Access::Read);  \
  }                                                   \
  void __tsan_unaligned_write##n(void* p) {           \
    if (g_checked) check_access(p, n, Access::Write); \
  }
// Atomic builtins in instrumented code (libstdc++'s reference counts): done here, checked as atomics.
#define EMU_TSAN_ATOMICS(n, T)                                                              \
  T __tsan_atomic##n##_load(const volatile T* a, int) {                                     \
    if (g_checked) check_access(const_cast<T*>(a), sizeof(T), Access::Atomic);              \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                            \
  }                                                                                         \
  void __tsan_atomic##n##_store(volatile T* a, T v, int) {                                  \
    if (g_checked) check_access(const_cast<T*>(a), sizeof(T), Access::Atomic);              \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                               \
  }                                                                                         \
  T __tsan_atomic##n##_exchange(volatile T* a, T v, int) {                                  \
    if (g_checked) check_access(const_cast<T*>(a), sizeof(T), Access::Atomic);              \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                     \
  }                                                                                         \
  EMU_TSAN_RMW(n, T, fetch_add)                                                             \
  EMU_TSAN_RMW(n, T, fetch_sub)                                                             \
  EMU_TSAN_RMW(n, T, fetch_and)                                                             \
  EMU_TSAN_RMW(n, T, fetch_or)                                                              \
  EMU_TSAN_RMW(n, T, fetch_xor)                                                             \
  EMU_TSAN_RMW(n, T, fetch_nand)                                                            \
  int __tsan_atomic##n##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {      \
    if (g_checked) check_access(const_cast<T*>(a), sizeof(T), Access::Atomic);              \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
  }                                                                                         \
  int __tsan_atomic##n##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {        \
    if (g_checked) check_access(const_cast<T*>(a), sizeof(T), Access::Atomic);              \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);  \
  }                                                                                         \
  T __tsan_atomic##n##_compare_exchange_val(volatile T* a, T c, T v, int, int) {            \
    if (g_checked) check_access(const_cast<T*>(a), sizeof(T), Access::Atomic);              \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
    return c;                                                                               \
  }
#define EMU_TSAN_RMW(n, T, op)                                                 \
  T __tsan_atomic##n##_##op(volatile T* a, T v, int) {                         \
    if (g_checked) check_access(const_cast<T*>(a), sizeof(T), Access::Atomic); \
    return __atomic_##op(a, v, __ATOMIC_SEQ_CST);                              \
  }

// ---- SanitizerCoverage's calls (clang -fsanitize-coverage=func,trace-loads,trace-stores). They come
// for the sanitizers' own loads too (AddressSanitizer's flags, UBSan's function signatures before an
// indirect call's target), all in the program's image, which is not checked there.
extern "C" char __executable_start[], _end[];  // the program's image (the linker's symbols)
namespace {
void check_instrumented(void* p, size_t n, Access kind) {
  if (p >= static_cast<void*>(__executable_start) && p < static_cast<void*>(_end)) return;
  check_access(p, n, kind);
}
}  // namespace
#define EMU_SANCOV_ACCESS(n)                                \
  void __sanitizer_cov_load##n(void* p) {                   \
    if (g_checked) check_instrumented(p, n, Access::Read);  \
  }                                                         \
  void __sanitizer_cov_store##n(void* p) {                  \
    if (g_checked) check_instrumented(p, n, Access::Write); \
  }

extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_read(void**) {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_read1(void* p) {
  if (g_checked) check_access(p, 1, Access::Read);
}
void __tsan_write1(void* p) {
  if (g_checked) check_access(p, 1, Access::Write);
}
EMU_TSAN_ACCESS(2)
EMU_TSAN_ACCESS(4)
EMU_TSAN_ACCESS(8)
EMU_TSAN_ACCESS(16)
void __tsan_read_range(void* p, unsigned long n) {
  if (g_checked && n) check_access(p, n, Access::Read);
}
void __tsan_write_range(void* p, unsigned long n) {
  if (g_checked && n) check_access(p, n, Access::Write);
}
EMU_TSAN_ATOMICS(8, char)
EMU_TSAN_ATOMICS(16, short)
EMU_TSAN_ATOMICS(32, int)
EMU_TSAN_ATOMICS(64, long)
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) {}

EMU_SANCOV_ACCESS(1)
EMU_SANCOV_ACCESS(2)
EMU_SANCOV_ACCESS(4)
EMU_SANCOV_ACCESS(8)
EMU_SANCOV_ACCESS(16)
}

// ---- the atomics of CUDA's device runtime. Fibers switch only at collectives, so each is atomic.
namespace {
template <class T, class F>
T rmw(T* p, F f) {
  if (g_checked) check_access(p, sizeof(T), Access::Atomic);
  const T old = *p;
  *p = f(old);
  return old;
}
}  // namespace

#define EMU_ATOMIC(name, T, expr)                      \
  T name(T* p, T v) {                                  \
    return rmw(p, [v](T o) { return (void)o, expr; }); \
  }
EMU_ATOMIC(atomicAdd, float, o + v)
EMU_ATOMIC(atomicAdd, double, o + v)
EMU_ATOMIC(atomicAdd, int, int(unsigned(o) + unsigned(v)))
EMU_ATOMIC(atomicAdd, unsigned, o + v)
EMU_ATOMIC(atomicAdd, unsigned long long, o + v)
EMU_ATOMIC(atomicAdd, __half, __float2half_rn(__half2float(o) + __half2float(v)))
EMU_ATOMIC(atomicAdd, __nv_bfloat16, __float2bfloat16_rn(__bfloat162float(o) + __bfloat162float(v)))
EMU_ATOMIC(atomicSub, int, int(unsigned(o) - unsigned(v)))
EMU_ATOMIC(atomicSub, unsigned, o - v)
EMU_ATOMIC(atomicMax, int, o > v ? o : v)
EMU_ATOMIC(atomicMax, unsigned, o > v ? o : v)
EMU_ATOMIC(atomicMax, long long, o > v ? o : v)
EMU_ATOMIC(atomicMax, unsigned long long, o > v ? o : v)
EMU_ATOMIC(atomicMin, int, o < v ? o : v)
EMU_ATOMIC(atomicMin, unsigned, o < v ? o : v)
EMU_ATOMIC(atomicMin, long long, o < v ? o : v)
EMU_ATOMIC(atomicMin, unsigned long long, o < v ? o : v)
EMU_ATOMIC(atomicExch, int, v)
EMU_ATOMIC(atomicExch, unsigned, v)
EMU_ATOMIC(atomicExch, unsigned long long, v)
EMU_ATOMIC(atomicExch, float, v)
EMU_ATOMIC(atomicOr, int, o | v)
EMU_ATOMIC(atomicOr, unsigned, o | v)
EMU_ATOMIC(atomicOr, unsigned long long, o | v)
EMU_ATOMIC(atomicAnd, int, o& v)
EMU_ATOMIC(atomicAnd, unsigned, o& v)
EMU_ATOMIC(atomicAnd, unsigned long long, o& v)
EMU_ATOMIC(atomicXor, int, o ^ v)
EMU_ATOMIC(atomicXor, unsigned, o ^ v)
EMU_ATOMIC(atomicXor, unsigned long long, o ^ v)

#define EMU_ATOMIC_CAS(T)                                              \
  T atomicCAS(T* p, T compare, T v) {                                  \
    return rmw(p, [compare, v](T o) { return o == compare ? v : o; }); \
  }
EMU_ATOMIC_CAS(unsigned short)
EMU_ATOMIC_CAS(int)
EMU_ATOMIC_CAS(unsigned)
EMU_ATOMIC_CAS(unsigned long long)
