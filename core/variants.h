// Kernel variants: a backend kernel may offer several implementations under names ("eigen",
// "openblas", "warp", ...), selectable per device type at run time so each stays testable and
// benchable. The first registered is the default. Selection is process-wide; a process starts with
// the ones MG_KERNEL_VARIANTS names, as device:op=variant pairs separated by commas (for example
// MG_KERNEL_VARIANTS=cuda:attention=simt,cpu:matmul=eigen).
#pragma once
#include <atomic>
#include <string>
#include <vector>

#include <memgrad/core/device.h>

namespace mg {

std::vector<std::string> kernel_ops(DeviceType d);                              // the kernels of `d` that have variants
std::vector<std::string> kernel_variants(DeviceType d, const std::string& op);  // empty if none
void set_kernel_variant(DeviceType d, const std::string& op, const std::string& variant);  // ValueError if unknown
std::string kernel_variant(DeviceType d, const std::string& op);                           // "" if none
// Index of the selected variant of `op` in kernel_variants(d, op); 0 for a kernel without variants.
int kernel_variant_index(DeviceType d, const std::string& op);
// Declares the variants of `op` on `d` (backends call this once at start-up). Returns the
// selection, which a kernel keeps and reads with no lookup on its hot path.
const std::atomic<int>& register_kernel_variants(DeviceType d, const std::string& op,
                                                 const std::vector<std::string>& variants);

}  // namespace mg
