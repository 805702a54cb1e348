#include "report.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace memgrad_cli {

void print_breakdown(int64_t peak, const mg::CategoryBytes& at_peak, const std::map<std::string, int64_t>& owners,
                     int top) {
  auto share = [peak](int64_t b) { return peak ? 100.0 * double(b) / double(peak) : 0.0; };
  std::printf("  %-16s %14s %12s %7s\n", "category", "bytes", "", "share");
  for (int c = 0; c < mg::kNumCategories; ++c)
    if (int64_t b = at_peak[size_t(c)])
      std::printf("  %-16s %14lld %12s %6.1f%%\n", mg::category_name(mg::Category(c)), static_cast<long long>(b),
                  mg::format_bytes(b).c_str(), share(b));
  std::printf("  %-16s %14lld %12s\n", "total", static_cast<long long>(peak), mg::format_bytes(peak).c_str());

  std::vector<std::pair<std::string, int64_t>> sorted(owners.begin(), owners.end());
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::printf("  largest owners at the peak:\n");
  auto row = [&share](const std::string& name, int64_t b) {
    std::printf("    %-40s %12s %6.1f%%\n", name.c_str(), mg::format_bytes(b).c_str(), share(b));
  };
  int64_t rest = 0;  // the owners past the top, in one line: the shares add up to the total
  for (size_t i = 0; i < sorted.size(); ++i)
    if (i < size_t(top))
      row(sorted[i].first.empty() ? "(no owner)" : sorted[i].first, sorted[i].second);
    else
      rest += sorted[i].second;
  if (sorted.size() > size_t(top)) row("... and " + std::to_string(sorted.size() - size_t(top)) + " more owners", rest);
}

void print_plan(const mg::plan::StepReport& r) {
  std::printf("the steady-state step (%s):\n",
              r.steady ? "from the second step on, every step allocates as the last one planned"
                       : "the allocator did not settle within the steps planned; figures of the last one");
  std::printf("  allocated peak %12s (%lld B)\n", mg::format_bytes(r.peak).c_str(), static_cast<long long>(r.peak));
  std::printf(
      "  reserved peak  %12s (%lld B): the steps run under a --memory-limit of exactly this, and %lld B less "
      "runs out of memory (%s)\n",
      mg::format_bytes(r.smallest_limit).c_str(), static_cast<long long>(r.smallest_limit),
      static_cast<long long>(mg::plan::kGranule),
      r.below_limit_fails_at > 0 ? ("in step " + std::to_string(r.below_limit_fails_at)).c_str()
                                 : "building the model");
  std::printf("  with no limit, the caching allocator's segments grow to %s (%lld B)\n",
              mg::format_bytes(r.reserved).c_str(), static_cast<long long>(r.reserved));
  std::printf("  the first step peaks at %s (%lld B) allocated: its optimizer state appears only at its end\n",
              mg::format_bytes(r.first_peak).c_str(), static_cast<long long>(r.first_peak));
  std::printf("  building the model and its trainer peaks at %s (%lld B) allocated\n",
              mg::format_bytes(r.build_peak).c_str(), static_cast<long long>(r.build_peak));
}

void print_kernel_times(const mg::KernelProfile& profile, double wall_seconds, int64_t steps) {
  const double n = double(std::max<int64_t>(steps, 1));
  auto line = [&](const char* what, const std::string& calls, double seconds) {
    std::printf("  %-28s %10s %11.3f ms %6.1f%%\n", what, calls.c_str(), 1e3 * seconds / n,
                wall_seconds > 0 ? 100.0 * seconds / wall_seconds : 0.0);
  };
  std::printf("  %-28s %10s %14s %7s\n", "kernel", "calls/step", "time/step", "share");
  char calls[32];
  for (const auto& e : profile.entries()) {
    std::snprintf(calls, sizeof calls, "%.1f", double(e.calls) / n);
    line(e.kernel.c_str(), calls, e.seconds);
  }
  line("(outside kernels)", "", wall_seconds - profile.seconds());
  line("step", "", wall_seconds);
  // What the cpu kernels ran on here (DESIGN principle 8): the ISA level and each variant's library.
  std::printf("  cpu: %s;", mg::to_string(mg::cpu_isa()));
  if (mg::cpu_kernels_isa() != mg::cpu_isa())  // a build without this level's copy (MG_CPU_LEVELS=host)
    std::printf(" memgrad's kernels: %s;", mg::to_string(mg::cpu_kernels_isa()));
  for (const std::string& op : mg::kernel_ops(mg::DeviceType::CPU)) {
    const std::string variant = mg::kernel_variant(mg::DeviceType::CPU, op);
    const std::string detail = mg::kernel_variant_detail(mg::DeviceType::CPU, op, variant);
    std::printf(" %s %s%s%s", op.c_str(), variant.c_str(), detail.empty() ? "" : ": ", detail.c_str());
  }
  std::printf("\n");
}

void print_outside_ledger(const mg::cuda::DeviceMemory& before, const mg::cuda::DeviceMemory& after) {
  auto line = [](const char* what, int64_t b) {
    std::printf("  %-66s %14lld %12s\n", what, static_cast<long long>(b), mg::format_bytes(b).c_str());
  };
  std::printf("device memory outside the ledger (cudaMemGetInfo; no plan counts it):\n");
  line("CUDA context (and other processes), before the model was built", before.outside_memgrad);
  line("cuBLAS/cuDNN handles and workspaces, kernel code loaded since", after.outside_memgrad - before.outside_memgrad);
  line("memgrad's caching allocator, reserved now", after.memgrad_reserved);
  line("used on the device now", after.used);
  line("the device's total", after.total);
}

std::string format_seconds(double s) {
  char buf[32];
  if (s < 1.0)
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

}  // namespace memgrad_cli
