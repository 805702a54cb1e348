// The CPU backend's kernels, one family per file. Each file is compiled once per ISA level the build
// dispatches on (CMakeLists.txt: baseline x86-64, x86-64-v3 and x86-64-v4 in a default build; one
// level under MG_NATIVE) into a namespace of its own, mg::cpu::<level> (MG_CPU_ISA_NS), with the
// helpers of loops.h: code of one level never calls code of another, nor shares an inline function's
// copy with a higher one (the lower levels' objects come first in the link, and the linker keeps the
// first copy). table.cpp gathers each level's kernels into its Backend table, backend.cpp picks the
// table of the CPU's level (core/cpu_isa.h). Code outside these namespaces is compiled for the
// baseline. The CPU has no optional (library) kernels: conv2d lowers to im2col + GEMM.
#pragma once
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
