// Printing what the ledger saw: a step's peak broken down by category and by owner.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include <memgrad/memgrad.h>

namespace memgrad_cli {

// The categories at the peak (bytes and share of `peak`) and the `top` largest owners.
void print_breakdown(int64_t peak, const mg::CategoryBytes& at_peak, const std::map<std::string, int64_t>& owners,
                     int top);

// A plan's figures for the steady-state step: the allocated peak, and the reserved peak (the smallest
// --memory-limit its steps run under) on the one line that says "reserved", then what the cache
// grows to without a limit and the first step's peak.
void print_plan(const mg::plan::StepReport& r);

// A kernel profile of `steps` steps that took `wall_seconds`: each kernel's calls and time per step
// and share of the wall time, then the time outside every kernel (dispatch, allocation, autograd's
// bookkeeping, making the batches).
void print_kernel_times(const mg::KernelProfile& profile, double wall_seconds, int64_t steps);

// The device's memory outside memgrad's ledger, as the driver sees it (cudaMemGetInfo): `before` was
// read before the model was built, `after` at the end of the run. What was used outside memgrad
// before is the CUDA context (and any other process on the device); what grew since is the cuBLAS
// and cuDNN handles and their workspaces, and kernel code loaded on first launch. No plan counts these.
void print_outside_ledger(const mg::cuda::DeviceMemory& before, const mg::cuda::DeviceMemory& after);

// "12.5 ms", "3.21 s".
std::string format_seconds(double seconds);

}  // namespace memgrad_cli
