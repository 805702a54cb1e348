// The CPU backend's kernels, one family per file, compiled once per ISA level the build dispatches on
// (CMakeLists.txt: baseline x86-64, x86-64-v3 and x86-64-v4 in a default build, except the families
// that gain nothing there, MG_CPU_BASELINE_FAMILIES; one level under MG_NATIVE) into a namespace of its
// own, mg::cpu::<level> (MG_CPU_ISA_NS), with the helpers of loops.h: code of one level never calls code
// of a higher one, nor shares an inline function's copy with a higher one (the linker keeps the first
// copy: the lower levels' objects come first). table.cpp gathers each level's kernels into its Backend
// table (the level below's where it lacks a family), backend.cpp picks the CPU's level's (core/cpu_isa.h).
// Code outside these namespaces is for the baseline. No optional kernels: conv2d lowers to im2col + GEMM.
#pragma once
#include <memgrad/core/dispatch.h>
#include <memgrad/kernels/backend.h>

#ifndef MG_CPU_ISA_NS
#error "kernels/cpu files are compiled with MG_CPU_ISA_NS, the ISA level's namespace (CMakeLists.txt)"
#endif

namespace mg::cpu::MG_CPU_ISA_NS {
using namespace mg::kernels;
#define MG_KERNEL(name, ret, ...) ret name(__VA_ARGS__);
#define MG_OPTIONAL_KERNEL(name, ret, ...)
#define MG_SCRATCH(name) ScratchOf<decltype(name)> name##_scratch;
#include <memgrad/kernels/kernel_list.h>

// This level's kernels as a Backend table, and their scratch functions as one (table.cpp).
const Backend& table();
const Backend& scratch_table();
}  // namespace mg::cpu::MG_CPU_ISA_NS

// Dtypes per level. The levels above the baseline (MG_CPU_ISA_BELOW names the level under them,
// CMakeLists.txt) compile the loops of the families whose files say so for the dtypes a training
// step runs, float32, float16 and bfloat16, and hand other dtypes (integers, bool; float64, the
// checks' dtype) to that level's copy of the same kernel: a higher level may call a lower one.
// Such a file starts each kernel with MG_CPU_LOWER_UNLESS(dtypes..., kernel, arguments...) and
// dispatches with dispatch_level / dispatch_floating_level; at the baseline (and in a build of one
// level) these are the plain dispatch over every dtype.
#ifdef MG_CPU_ISA_BELOW
namespace mg::cpu::MG_CPU_ISA_BELOW {
using namespace mg::kernels;
#define MG_KERNEL(name, ret, ...) ret name(__VA_ARGS__);
#define MG_OPTIONAL_KERNEL(name, ret, ...)
#include <memgrad/kernels/kernel_list.h>
}  // namespace mg::cpu::MG_CPU_ISA_BELOW
#endif

namespace mg::cpu::MG_CPU_ISA_NS {

#ifdef MG_CPU_ISA_BELOW
inline constexpr bool kAllDtypes = false;
#else
inline constexpr bool kAllDtypes = true;
#endif

// Whether this level compiles loops for dtype t.
constexpr bool level_has(DType t) { return kAllDtypes || t == kFloat32 || t == kFloat16 || t == kBFloat16; }
template <class... D>
constexpr bool level_has_all(D... t) {
  return (level_has(t) && ...);
}

// dispatch (core/dispatch.h) over this level's dtypes: f is instantiated for no other.
template <class F>
void dispatch_level(DType t, F&& f) {
  if constexpr (kAllDtypes) {
    dispatch(t, f);
  } else {
    switch (t) {
      case kFloat32:
        return f(Tag<float>{});
      case kFloat16:
        return f(Tag<Half>{});
      case kBFloat16:
        return f(Tag<BFloat16>{});
      default:
        MG_CHECK(false, DTypeError, "cpu kernels: dtype ", t, " reached a level without its loops");
    }
  }
}
// dispatch_floating over this level's dtypes.
template <class F>
void dispatch_floating_level(DType t, const char* op, F&& f) {
  if constexpr (kAllDtypes)
    dispatch_floating(t, op, f);
  else
    dispatch_level(t, f);
}

}  // namespace mg::cpu::MG_CPU_ISA_NS

// The first statement of a kernel whose loops this level compiles only for its dtypes:
//   MG_CPU_LOWER_UNLESS(level_has_all(x.dtype(), out.dtype()), unary, op, x, out, p);
// returns the lower level's kernel(arguments) where the condition is false.
#ifdef MG_CPU_ISA_BELOW
#define MG_CPU_LOWER_UNLESS(cond, kernel, ...) \
  if (!(cond)) return ::mg::cpu::MG_CPU_ISA_BELOW::kernel(__VA_ARGS__)
#else
#define MG_CPU_LOWER_UNLESS(cond, kernel, ...) static_cast<void>(0)
#endif
