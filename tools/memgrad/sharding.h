// What `memgrad train` says about parameters that do not stay resident (--zero 3, --offload params)
// and about the ranks of a data-parallel run: the units, their traffic, the host memory, ZeRO's
// formula beside the ledger, and the check that every rank runs the same configuration.
#pragma once
#include <cstdint>
#include <string>

#include <memgrad/memgrad.h>

namespace memgrad_cli {

// Throws UsageError on every rank (collective) unless all of them pass the same `configuration`
// (flags, world size, the state resumed): each rank compares its own with rank 0's.
void check_ranks_agree(mg::distributed::ProcessGroup& world, const std::string& configuration);

// "5 units (h.0 .. h.3 and the root); the largest, root, 160 KiB gathered; this rank's shards 1.6 MiB"
// for parameters of `element_size` bytes.
std::string units_line(const mg::distributed::DataParallel& dp, int64_t element_size);

// Gathers, reductions and copies per step and the time blocked waiting for them.
void print_unit_traffic(const mg::distributed::UnitStats& s, int64_t steps, double train_seconds, bool prefetch);

// The host memory of `device` at the end of a step and at its peak (beyond `base` bytes held before
// the model was built), beside the planned peak.
void print_host_memory(const mg::Device& device, const mg::HostMemoryStats& at_end, int64_t base, int64_t planned_peak);

// ZeRO's bytes for one rank's parameters, gradients and optimizer state (Rajbhandari et al. 2020)
// for `parameters` elements at `stage` of `world` ranks, in the run's precision and optimizer.
int64_t zero_formula_bytes(int64_t parameters, const mg::train::StepOptions& step, int stage, int64_t world);

}  // namespace memgrad_cli
