#include "sharding.h"

#include <cmath>
#include <cstdio>

#include "options.h"
#include "report.h"

namespace memgrad_cli {

void check_ranks_agree(mg::distributed::ProcessGroup& world, const std::string& configuration) {
  const std::string first = world.broadcast(configuration, 0);
  const std::vector<int64_t> differs = world.all_gather(std::vector<int64_t>{first != configuration});
  std::string ranks;
  for (size_t r = 0; r < differs.size(); ++r)
    if (differs[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (ranks.empty()) return;
  const bool one = ranks.find(',') == std::string::npos;
  throw UsageError(
      "the ranks do not run the same configuration (every rank must get the same flags and resume the "
      "same state): rank" +
      std::string(one ? " " : "s ") + ranks + (one ? " differs" : " differ") + " from rank 0\n  rank 0: " + first +
      (configuration == first ? "" : "\n  rank " + std::to_string(world.rank()) + ": " + configuration));
}

std::string units_line(const mg::distributed::DataParallel& dp, int64_t element_size) {
  const mg::distributed::ParameterUnits& u = *dp.units();
  const size_t n = u.size();
  int64_t shards = 0, largest = 0;
  size_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    shards += u.chunk(k);
    if (u.chunk(k) * dp.world_size() > largest) largest = u.chunk(k) * dp.world_size(), at = k;
  }
  const std::string names = n > 1 ? u.name(0) + (n > 2 ? " .. " + u.name(n - 2) : "") + " and the root" : "the root";
  return std::to_string(n) + " units (" + names + "); the largest, " + u.name(at) + ", " +
         mg::format_bytes(largest * element_size) + " gathered; this rank's shards " +
         mg::format_bytes(shards * element_size) + (u.offloaded() ? " in host memory" : "");
}

void print_unit_traffic(const mg::distributed::UnitStats& s, int64_t steps, double train_seconds, bool prefetch) {
  const double per = 1.0 / double(std::max<int64_t>(steps, 1));
  std::printf(
      "units: per step %.1f gathers (%s), %.1f reductions (%s), %s copied between host and device; blocked %s "
      "waiting for units to arrive, %s for their gradients to leave (%.1f%% of the steps' time; the next unit %s)\n",
      double(s.gathers) * per, mg::format_bytes(int64_t(double(s.gathered_bytes) * per)).c_str(),
      double(s.reductions) * per, mg::format_bytes(int64_t(double(s.reduced_bytes) * per)).c_str(),
      mg::format_bytes(int64_t(double(s.copied_bytes) * per)).c_str(), format_seconds(s.gather_wait * per).c_str(),
      format_seconds(s.reduce_wait * per).c_str(),
      train_seconds > 0 ? 100.0 * (s.gather_wait + s.reduce_wait) / train_seconds : 0.0,
      prefetch ? "prefetched while one runs" : "not prefetched: --no-unit-prefetch");
  if (s.copy_seconds > 0)
    std::printf("  the copies between host and device took %s per step on the copy thread\n",
                format_seconds(s.copy_seconds * per).c_str());
}

void print_host_memory(const mg::Device& device, const mg::HostMemoryStats& at_end, int64_t base,
                       int64_t planned_peak) {
  const int64_t peak = mg::host_memory_stats(device).peak - base;
  std::printf(
      "  host memory (--offload params: off the device's ledger and its limit): after a step Parameter %s, "
      "Gradient %s, OptimizerState %s; peak %s (%lld B), planned on meta %s (%lld B): %s\n",
      mg::format_bytes(at_end.category(mg::Category::Parameter)).c_str(),
      mg::format_bytes(at_end.category(mg::Category::Gradient)).c_str(),
      mg::format_bytes(at_end.category(mg::Category::OptimizerState)).c_str(), mg::format_bytes(peak).c_str(),
      static_cast<long long>(peak), mg::format_bytes(planned_peak).c_str(), static_cast<long long>(planned_peak),
      peak == planned_peak ? "exact" : ("off by " + std::to_string(peak - planned_peak) + " B").c_str());
}

int64_t zero_formula_bytes(int64_t parameters, const mg::train::StepOptions& step, int stage, int64_t world) {
  const bool half = mg::train::storage_dtype(step.precision).has_value();
  const double p = half ? 2 : 4;
  const double k = double(mg::plan::optimizer_state_bytes_per_parameter(step.optimizer, half));
  return int64_t(std::llround(double(parameters) * mg::plan::zero_bytes_per_parameter(p, p, k, stage, world)));
}

}  // namespace memgrad_cli
