// Where a step's time goes, kernel by kernel: the time counterpart of the memory ledger. While a
// KernelProfile is alive, every kernel this thread runs through the backends (kernels::run) is
// timed with a steady clock and added to its kernel's line. Time outside all kernels is the
// framework's own: dispatch, checks, allocation and autograd's bookkeeping.
//
// Only the outermost kernel of a call is timed (a kernel that runs others counts them as its own),
// and under a memory budget a kernel's time includes bringing its evicted inputs back. On CUDA the
// device is synchronized before and after each kernel, so the time is the kernel's and not its
// launch's, and work on other streams is not overlapped while a profile runs. Meta runs no kernels
// and adds nothing.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <memgrad/core/device.h>

namespace mg {
namespace detail {
class KernelSpan;
}

class KernelProfile {
 public:
  struct Entry {
    std::string kernel;  // as kernels/kernel_list.h names it: "matmul", "layer_norm", ...
    int64_t calls = 0;
    double seconds = 0;
  };

  KernelProfile();  // times from now on, on this thread, until destroyed (profiles nest)
  ~KernelProfile();
  KernelProfile(const KernelProfile&) = delete;
  KernelProfile& operator=(const KernelProfile&) = delete;

  // One entry per kernel that ran, the longest total first.
  std::vector<Entry> entries() const;
  double seconds() const;                         // all kernels together
  double seconds(std::string_view kernel) const;  // 0 for a kernel that never ran
  int64_t calls(std::string_view kernel) const;
  void reset();  // forget everything so far; keep timing

 private:
  friend class detail::KernelSpan;
  void add(const char* kernel, double seconds);
  std::vector<Entry> entries_;  // in the order the kernels first ran
  KernelProfile* outer_;
};

namespace detail {

extern std::atomic<int> g_kernel_profiles;  // profiles alive on any thread (a fast "none" check)
inline bool any_kernel_profile() { return g_kernel_profiles.load(std::memory_order_relaxed) > 0; }

// One timed kernel call (kernels::run makes one when any_kernel_profile()): inert when this thread
// has no profile or is already inside a timed kernel. stop() records; a call that raises records
// nothing.
class KernelSpan {
 public:
  KernelSpan(const Device& device, const char* kernel);
  ~KernelSpan();
  KernelSpan(const KernelSpan&) = delete;
  KernelSpan& operator=(const KernelSpan&) = delete;
  void stop();

 private:
  const Device device_;
  const char* kernel_;
  bool active_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace detail
}  // namespace mg
