// Allocation traces (core/memory.h): the requests an allocator served, recorded, and served again.
#include <memgrad/core/error.h>
#include <memgrad/core/memory/allocator_impl.h>
#include <memgrad/core/memory/trace.h>

namespace mg {

using memory::impl::DeviceState;

TraceRecorder::TraceRecorder(const Device& d, AllocationTrace* out) : device_(d) {
  DeviceState& s = memory::impl::state(d);
  std::lock_guard<std::mutex> g(s.mu);
  MG_CHECK(!s.trace, ValueError, "TraceRecorder: ", d, "'s allocator is already recorded");
  s.trace = out;
  s.traced.clear();
  state_ = &s;
}

TraceRecorder::~TraceRecorder() {
  auto& s = *static_cast<DeviceState*>(state_);
  std::lock_guard<std::mutex> g(s.mu);
  s.trace = nullptr;
  s.traced.clear();
}

TraceReplayer::TraceReplayer(const Device& d) : device_(d) {
  DeviceState& s = memory::impl::state(d);
  std::lock_guard<std::mutex> g(s.mu);
  state_ = &s;
  bare_before_ = s.bare_oom;
  s.bare_oom = true;
}

bool TraceReplayer::run(const AllocationTrace& trace, size_t begin, size_t end, uint64_t shift) {
  MG_CHECK(begin <= end && end <= trace.events.size(), IndexError, "TraceReplayer::run: events [", begin, ", ", end,
           ") of ", trace.events.size());
  for (size_t i = begin; i < end; ++i) {
    const AllocationTrace::Event& e = trace.events[i];
    if (e.alloc) {
      try {
        live_[e.id + shift] = memory::allocate(device_, e.bytes, e.category);
      } catch (const OutOfMemoryError&) {
        return false;
      }
      continue;
    }
    auto it = live_.find(e.id + shift);
    MG_CHECK(it != live_.end(), ValueError, "TraceReplayer::run: event ", i, " releases allocation ", e.id + shift,
             ", which is not live (a stretch served again that is not periodic)");
    memory::release(it->second);
    live_.erase(it);
  }
  return true;
}

TraceReplayer::~TraceReplayer() {
  for (auto& [id, b] : live_) memory::release(b);
  auto& s = *static_cast<DeviceState*>(state_);
  std::lock_guard<std::mutex> g(s.mu);
  s.bare_oom = bare_before_;
}

}  // namespace mg
