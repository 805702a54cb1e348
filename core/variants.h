// Kernel variants: a backend kernel may offer several implementations under names ("eigen",
// "openblas", "warp", ...), selectable per device type at run time so each stays testable and
// benchable. The first registered is the default. Selection is process-wide; a process starts with
// the ones MG_KERNEL_VARIANTS names, as device:op=variant pairs separated by commas (for example
// MG_KERNEL_VARIANTS=cuda:attention=simt,cpu:matmul=eigen). Kernels declare their variants through
// core/variants_impl.h (private).
#pragma once
#include <string>
#include <vector>

#include <memgrad/core/device.h>

namespace mg {

std::vector<std::string> kernel_ops(DeviceType d);                              // the kernels of `d` that have variants
std::vector<std::string> kernel_variants(DeviceType d, const std::string& op);  // empty if none
void set_kernel_variant(DeviceType d, const std::string& op, const std::string& variant);  // ValueError if unknown
std::string kernel_variant(DeviceType d, const std::string& op);                           // "" if none
// What `variant` of `op` runs on this machine, where that depends on the machine: a library, its
// version and code path ("OpenBLAS 0.3.21, core SkylakeX (avx512)"); for a variant that picks at
// run time ("auto"), the variant it picks first. "" where the kernel says nothing.
std::string kernel_variant_detail(DeviceType d, const std::string& op, const std::string& variant);

}  // namespace mg
