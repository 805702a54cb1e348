// A plan of a training program: what the planner hands a program (StepContext), what a plan is made
// for (PlanOptions), what it states (StepReport: the steady-state step's allocated and reserved peaks,
// to the byte), and plan(), measure() and fits(). See planner.h for the whole planner.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <memgrad/core/budget/budget.h>
#include <memgrad/core/memory.h>
#include <memgrad/train/policy.h>

namespace mg::plan {

// What the planner hands a program: the device to build on, the batch to build for and the policy
// to run its chain of blocks under (run_chain(chain, x, ctx.policy)).
struct StepContext {
  Device device;
  int64_t batch = 1;
  train::Policy policy;
};
// A training program: builds its model, optimizer and whatever else it keeps on ctx.device, and
// returns one training step (forward, backward, optimizer step), which the planner calls
// repeatedly. Everything the step allocates on the device must be made on ctx.device.
using Step = std::function<void()>;
using Program = std::function<Step(const StepContext&)>;

// What a plan is made for and how far it runs.
struct PlanOptions {
  DeviceType device = DeviceType::CPU;  // the device whose kernels' scratch meta books (cpu or cuda)
  int64_t memory_limit = 0;             // run the steps under this cap on reserved bytes (0: none)
  int64_t max_steps = 12;               // steps at most while looking for the steady state
  int64_t steps = 0;                    // 0: until the allocator repeats itself; k: exactly k steps
  bool smallest_limit = true;           // search for the smallest memory limit the steps run under
  // The search serves the first run's recorded requests again under each limit it tries (core/memory/
  // trace.h) instead of running the program again; false reruns it (the same result, for tests).
  bool replay_search = true;
  // false: the caller reads only allocated figures (peak, first_peak, categories, owners, FLOPs), so
  // the steps stop once the recorded requests show them periodic (steps 2 and 3 ask for the same
  // bytes in the same order): every later step then allocates and frees as the last, and only the
  // reserved bytes, which depend on the cache's layout, could still change. Implies no smallest_limit.
  bool settle_reserved = true;
  // Called with what a long planner (mixed_candidates) is about to plan, for progress lines.
  std::function<void(const std::string&)> progress;
  // Run the steps under the budget runtime (budget::enable with these options, the allocator's cache
  // off, memory_limit as its limit): its evictions, recomputes, offloads, floor and modeled time.
  std::optional<budget::Options> budget;
};

// The allocation granule: requests, segments and therefore reserved bytes are multiples of it.
inline constexpr int64_t kGranule = 512;

// What the steps allocated. Byte figures count from a fresh allocator (plans and measure()) or from
// what was live before the program was built (StepRunner).
struct StepReport {
  Device device;                        // where the steps ran
  DeviceType target = DeviceType::CPU;  // the device the plan is for (meta), else device's type
  int64_t peak = 0;                     // allocated bytes at the last step's peak
  int64_t reserved = 0;                 // reserved bytes: the peak over all the steps run
  int64_t first_peak = 0;               // allocated bytes at the first step's peak
  int64_t build_peak = 0;               // allocated bytes at the peak while the program was built
  // The smallest memory limit the steps run under: a limit kGranule bytes lower throws
  // OutOfMemoryError (found by bisection on meta runs; 0 when not searched). With no limit the cache
  // grows to `reserved`, which is at least this.
  int64_t smallest_limit = 0;
  // The step that runs out of memory under smallest_limit - kGranule (0: building the program).
  int64_t below_limit_fails_at = -1;
  int64_t steps = 0;    // steps run (with out_of_memory: the one that failed, 0 while building); breakdown of the last
  bool steady = false;  // the allocator's layout repeated: every later step allocates as the last
  // With PlanOptions::settle_reserved off: the requests repeated (the allocated figures are the steady
  // state's; `reserved` is the largest so far, not necessarily the steady state's).
  bool periodic = false;
  bool out_of_memory = false;  // the steps did not run under PlanOptions::memory_limit
  std::string oom_message;     // the OutOfMemoryError's message
  // With out_of_memory: the error's fragmentation forensics (why the cache could not serve it).
  std::shared_ptr<const Fragmentation> oom_fragmentation;
  CategoryBytes at_peak{};        // by category at the last step's peak
  CategoryBytes category_peak{};  // each category's own peak in the last step
  std::map<std::string, int64_t> at_peak_by_owner;
  double flops = 0, recompute_flops = 0;  // in the last step
  // Under PlanOptions::budget: what the runtime did in all the steps, and each mode's floor over them
  // (budget::floor; floors[remat][offload]). smallest_limit is then found from that mode's floor up.
  budget::Stats budget;
  budget::Floor floors[2][4];
  // The wall-clock seconds of the fastest step after the first (of the only one if one ran; 0 on
  // meta: on a loaded machine the fastest is the least disturbed), and under PlanOptions::budget the
  // last step's modeled seconds (budget::Stats::modeled_seconds over it: on meta, the prediction).
  double step_seconds = 0, modeled_step_seconds = 0;
  int64_t category(Category c) const { return at_peak[size_t(c)]; }
  int64_t peak_of(Category c) const { return category_peak[size_t(c)]; }
  bool fits(int64_t budget) const;  // the steps ran, and their reserved peak is within budget
  std::string str() const;          // peaks, categories at the peak, top owners, FLOPs
};

// Runs `program` on kMeta for options.device, in a fresh allocator (IsolatedAllocator) under
// options.memory_limit, and reports it. An OutOfMemoryError under the limit is reported, not thrown.
StepReport plan(const Program& program, const StepContext& ctx, const PlanOptions& options = {});
// The same steps on a real device in a fresh allocator of its own, measured: what plan() predicts.
StepReport measure(const Program& program, const StepContext& ctx, const PlanOptions& options = {});
// Whether the steps run on meta under a memory limit of `budget` (every step, to the steady state).
bool fits(const Program& program, const StepContext& ctx, int64_t budget, const PlanOptions& options = {});

// Bytes a device uses outside memgrad's allocator, which no plan counts: the CUDA context, and the
// cuBLAS and cuDNN handles and their workspaces. bytes < 0: not known without the device (on one,
// cuda::device_memory().outside_memgrad measures them all).
struct OutsideBytes {
  std::string what;
  int64_t bytes = -1;
};
std::vector<OutsideBytes> outside_allocator(DeviceType device);

}  // namespace mg::plan
