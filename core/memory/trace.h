// Allocation traces: the requests an allocator served, recorded, and served again under another
// memory limit (the planner's search for the smallest limit replays instead of rerunning a program).
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <memgrad/core/memory.h>

namespace mg {

struct Block;

// The requests an allocator served, in order: each allocation (its number in the trace, the bytes
// asked for, its category) and each release (the allocation it frees). A deterministic program asks
// for the same bytes in the same order under any memory limit until a request fails, so replaying
// its trace under a limit tells whether the program runs under it without running the program: the
// planner's search for the smallest limit replays instead of rerunning (plan/planner.cpp).
struct AllocationTrace {
  struct Event {
    uint64_t id;   // allocations are numbered 0, 1, ... in the order they were made
    size_t bytes;  // allocations: requested
    Category category;
    bool alloc;
  };
  std::vector<Event> events;
  uint64_t allocations = 0;
};
// Records every allocation and release of `d`'s allocator for this thread (the innermost
// IsolatedAllocator's, else the device's) into *out while it lives, from any thread. One at a time
// per allocator.
class TraceRecorder {
 public:
  TraceRecorder(const Device& d, AllocationTrace* out);
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

 private:
  Device device_;
  void* state_;
};
// Serves a trace's requests on `d`'s allocator for this thread (an IsolatedAllocator's, normally,
// with the limit to try), releasing what it holds when it ends.
class TraceReplayer {
 public:
  // (Its out-of-memory errors on `d`'s allocator carry no message or forensics while it lives: a
  // search throws many.)
  explicit TraceReplayer(const Device& d);
  ~TraceReplayer();
  TraceReplayer(const TraceReplayer&) = delete;
  TraceReplayer& operator=(const TraceReplayer&) = delete;
  // Serves events [begin, end) of `trace`, every id plus `shift` (a periodic stretch served again:
  // its releases of the stretch before it name those allocations' shifted ids); false when a request
  // runs out of memory (OutOfMemoryError caught), true when all were served.
  bool run(const AllocationTrace& trace, size_t begin, size_t end, uint64_t shift = 0);

 private:
  Device device_;
  void* state_;
  bool bare_before_;
  std::unordered_map<uint64_t, Block*> live_;
};

}  // namespace mg
