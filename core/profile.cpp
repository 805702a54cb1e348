#include <memgrad/core/profile.h>

#include <algorithm>

#include <memgrad/core/cuda.h>

namespace mg {

namespace detail {
std::atomic<int> g_kernel_profiles{0};
}  // namespace detail

namespace {
thread_local KernelProfile* t_innermost = nullptr;
thread_local int t_span_depth = 0;  // timed kernels open on this thread (only the outermost counts)

// The entry of `kernel` in `entries` (const or not), or null.
template <class Entries>
auto entry_of(Entries& entries, std::string_view kernel) -> decltype(&entries[0]) {
  for (auto& e : entries)
    if (e.kernel == kernel) return &e;
  return nullptr;
}
}  // namespace

KernelProfile::KernelProfile() : outer_(t_innermost) {
  t_innermost = this;
  detail::g_kernel_profiles.fetch_add(1, std::memory_order_relaxed);
}
KernelProfile::~KernelProfile() {
  t_innermost = outer_;
  detail::g_kernel_profiles.fetch_sub(1, std::memory_order_relaxed);
}

void KernelProfile::add(const char* kernel, double seconds) {
  Entry* e = entry_of(entries_, kernel);
  if (!e) e = &entries_.emplace_back(Entry{kernel, 0, 0});
  ++e->calls;
  e->seconds += seconds;
}

std::vector<KernelProfile::Entry> KernelProfile::entries() const {
  std::vector<Entry> out = entries_;
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return out;
}

double KernelProfile::seconds() const {
  double s = 0;
  for (const Entry& e : entries_) s += e.seconds;
  return s;
}

double KernelProfile::seconds(std::string_view kernel) const {
  const Entry* e = entry_of(entries_, kernel);
  return e ? e->seconds : 0;
}

int64_t KernelProfile::calls(std::string_view kernel) const {
  const Entry* e = entry_of(entries_, kernel);
  return e ? e->calls : 0;
}

void KernelProfile::reset() { entries_.clear(); }

namespace detail {

KernelSpan::KernelSpan(const Device& device, const char* kernel)
    : device_(device), kernel_(kernel), active_(t_innermost != nullptr && t_span_depth == 0 && !device.is_meta()) {
  if (!active_) return;
  ++t_span_depth;
  if (device_.is_cuda()) cuda::synchronize(device_.index);  // earlier work is not this kernel's
  start_ = std::chrono::steady_clock::now();
}

KernelSpan::~KernelSpan() {
  if (active_) --t_span_depth;
}

void KernelSpan::stop() {
  if (!active_) return;
  if (device_.is_cuda()) cuda::synchronize(device_.index);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  for (KernelProfile* p = t_innermost; p; p = p->outer_) p->add(kernel_, s);
}

}  // namespace detail
}  // namespace mg
