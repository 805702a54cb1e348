// Plans timed by a cost model: the cost model fitted on the device, a plan run on meta under the
// budget runtime, and the same run on the device against the clock.
#include <memgrad/plan/timed.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>

#include <memgrad/core/error.h>

namespace mg::plan {

namespace {

PlanOptions timed_options(const PlanOptions& options, const budget::Options& runtime, int64_t limit) {
  PlanOptions o = options;
  if (o.steps == 0) o.steps = kTimedSteps;
  o.smallest_limit = false;
  o.memory_limit = limit;
  o.budget = runtime;
  return o;
}

}  // namespace

std::string TimedPlan::mode() const {
  std::string m;
  auto add = [&m](const char* s) { m += (m.empty() ? "" : "+") + std::string(s); };
  bool recompute = !policy.segments.empty() || policy.selective, offload = runtime.offload != budget::Offload::None;
  for (const budget::Directive& d : runtime.directives)  // a per-tensor plan's
    (d.action == budget::Directive::Action::Recompute ? recompute : offload) = true;
  if (recompute) add("recompute");
  if (offload) add("offload");
  if (runtime.remat == budget::Remat::Dynamic) add("dynamic remat");
  return m.empty() ? "keep" : m;
}

namespace {
// Host copies timed on the program's own: two steps under `limit` with activations offloaded (the
// first warms the host pool), the second's copied bytes over their time. A probe's rate depends
// on whether its pages were touched before (9.6 against 30-60 GB/s into fresh or reused memory here);
// a step's copies go into a mix of both (18-19 GB/s). Left as it is where nothing was offloaded.
void time_host_copies(const Device& d, int64_t limit, const std::function<void()>& step, budget::CostModel& m) {
  budget::Options o;
  o.limit = limit, o.remat = budget::Remat::None, o.offload = budget::Offload::Activations, o.model = m;
  budget::enable(d, o);
  try {
    step();
    budget::reset_stats(d);
    step();
  } catch (const OutOfMemoryError&) {
    return;  // no room to offload in: the probe's rate stays
  }
  const budget::Stats s = budget::stats(d);
  int64_t out = 0;
  for (int64_t b : s.offloaded_bytes) out += b;
  // In a steady step each storage sent out comes back once: twice its bytes crossed.
  if (s.offloads > 0 && s.transfer_seconds > 0) m.host_bytes_per_second = 2.0 * double(out) / s.transfer_seconds;
}
}  // namespace

budget::CostModel fit_cost_model(const Program& program, const StepContext& ctx, const PlanOptions& options) {
  const Device& d = ctx.device;
  MG_CHECK(!d.is_meta(), ValueError, "plan::fit_cost_model: expected a cpu or cuda device, got meta");
  IsolatedAllocator allocator(d);
  set_caching(d, false);  // as every plan under the runtime runs
  budget::Options watch;  // no limit: the runtime records and times the kernels, nothing leaves
  watch.remat = budget::Remat::None;
  budget::enable(d, watch);
  struct Off {
    const Device& d;
    ~Off() { budget::disable(d); }
  } off{d};
  const int64_t timed = std::max<int64_t>(options.steps, 3);
  auto say = [&](const std::string& what) {
    if (options.progress) options.progress("fitting the cost model: " + what + " on the cpu");
  };
  say("building the program");
  const Step program_step = program(ctx);
  // Each phase counts its own steps: the host copies' two run only where offloading has room.
  const auto counted = [&](const std::string& phase, int64_t total) {
    return [&, phase, total, k = int64_t(0)]() mutable {
      say(phase + "step " + std::to_string(++k) + " of " + std::to_string(total));
      program_step();
    };
  };
  const std::function<void()> step = counted("", 2 + timed);
  for (int i = 0; i < 2; ++i) step();  // the optimizer state made, the memory touched: steady steps follow
  // Each step fitted on its own, and the fastest step's fit kept: a burst of load elsewhere slows a
  // step, not the machine, and measure_plan times a plan by its fastest step too.
  budget::CostModel fastest;
  double fastest_wall = -1;
  for (int64_t i = 0; i < timed; ++i) {
    budget::reset_stats(d);
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (fastest_wall >= 0 && wall >= fastest_wall) continue;
    const budget::Stats s = budget::stats(d);
    const double outside = s.kernels ? std::max(0.0, wall - s.kernel_seconds) / double(s.kernels) : 0;
    fastest = budget::fit_cost_model(d, outside), fastest_wall = wall;
  }
  // Halfway from the floor with activations offloaded to the peak: a limit the step runs under, with
  // saved tensors to send out whatever share of the peak they are (80% of the peak was below the
  // floor of GPT-2 124M cut to two blocks, whose parameters and AdamW state are most of it).
  const int64_t peak = memory_stats(d).peak_allocated,
                floor = budget::floor(d, budget::Remat::None, budget::Offload::Activations).bytes;
  if (floor < peak) time_host_copies(d, floor + (peak - floor) / 2, counted("host copies, ", 2), fastest);
  return fastest;
}

TimedPlan time_plan(const Program& program, const StepContext& ctx, const std::string& method, const train::Policy& p,
                    budget::Options runtime, int64_t budget, const PlanOptions& options) {
  TimedPlan t{method, p, runtime, budget, {}, 0, -1, {}};
  StepContext x = ctx;
  x.policy = p;
  t.planned = plan(program, x, timed_options(options, runtime, budget));
  t.predicted = t.planned.modeled_step_seconds;
  return t;
}

StepReport measure_plan(const Program& program, const StepContext& ctx, TimedPlan& p, const PlanOptions& options) {
  StepContext x = ctx;
  x.policy = p.policy;
  const StepReport r = measure(program, x, timed_options(options, p.runtime, p.budget));
  if (!r.out_of_memory) p.measured = r.step_seconds;
  return r;
}

}  // namespace mg::plan
