// Running a program's steps on meta (plans) or on a device (measurements) in a fresh allocator, to
// the steady state; the smallest memory limit the steps run under; the largest batch for a budget.
#include <memgrad/plan/planner.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include <memgrad/core/error.h>
#include <memgrad/core/flops.h>
#include <memgrad/core/memory/trace.h>
#include <memgrad/core/random.h>

namespace mg::plan {

// ---- running steps

namespace {

// The allocator's layout on `d`: segments in the order they were made (which is what the allocator
// breaks ties by), each block's size and what it holds. Equal layouts after two steps mean the next
// step allocates, frees and reuses exactly as the one after the earlier did, on any device.
std::string layout(const Device& d) {
  std::vector<SegmentInfo> segments = memory_segments(d);
  std::sort(segments.begin(), segments.end(), [](auto& a, auto& b) { return a.serial < b.serial; });
  std::ostringstream os;
  for (const SegmentInfo& seg : segments) {
    os << seg.size << (seg.small_pool ? "s" : "l") << "[";
    for (const BlockInfo& b : seg.blocks)
      os << b.size << (b.in_use ? "+" : "-") << b.requested << ":" << int(b.category) << ":" << b.owner << ",";
    os << "]";
  }
  return os.str();
}

// The report's byte figures from the stats of the step that just ran.
void record_step(StepReport& r, const MemoryStats& s, const FlopCounter& flops) {
  r.peak = s.peak_allocated;
  r.reserved = std::max(r.reserved, s.peak_reserved);
  r.at_peak = s.at_peak_by_category;
  r.category_peak = s.peak_by_category;
  r.at_peak_by_owner.clear();
  for (auto& [owner, bytes] : s.at_peak_by_owner)
    if (bytes) r.at_peak_by_owner[owner] = bytes;
  r.flops = flops.total();
  r.recompute_flops = flops.recompute();
}

// A run's requests to the allocator (its trace) and where each step's begin: starts[k - 1] is the
// first event of step k, starts[steps] the end of the last; ids[k - 1] the first allocation's number.
struct Recorded {
  AllocationTrace trace;
  std::vector<size_t> starts;
  std::vector<uint64_t> ids;
  size_t steps() const { return starts.empty() ? 0 : starts.size() - 1; }
  // Whether the last step asks for what the one before did (its allocations numbered `period` later),
  // so that later steps can be served as copies of it. The planner's steps from the second on run
  // the same code; this checks it rather than assumes it.
  bool periodic(uint64_t* period) const {
    const size_t k = steps();
    if (k < 3) return false;
    const uint64_t p = ids[k - 1] - ids[k - 2];
    if (ids[k] - ids[k - 1] != p || starts[k] - starts[k - 1] != starts[k - 1] - starts[k - 2]) return false;
    for (size_t i = starts[k - 2], j = starts[k - 1]; j < starts[k]; ++i, ++j) {
      const AllocationTrace::Event &a = trace.events[i], &b = trace.events[j];
      if (a.alloc != b.alloc || a.bytes != b.bytes || a.category != b.category || a.id + p != b.id) return false;
    }
    *period = p;
    return true;
  }
};

// Builds the program on `device` in a fresh allocator capped at `limit` and runs its steps: exactly
// options.steps, or until the layout after a step repeats the one after an earlier step (every step
// from the second on runs the same code, so from there the steps cycle) or options.max_steps. With
// `recorded`, its requests are recorded too.
StepReport run_steps(const Program& program, const StepContext& given, const PlanOptions& o, const Device& device,
                     int64_t limit, Recorded* recorded = nullptr) {
  MG_CHECK(o.steps >= 0 && o.max_steps >= 1, ValueError, "plan: expected steps >= 0 and max_steps >= 1, got ", o.steps,
           " and ", o.max_steps);
  MG_CHECK(o.device != DeviceType::Meta, ValueError, "plan: a plan is made for cpu or cuda, got meta");
  std::optional<MetaTargetGuard> target;
  if (device.is_meta()) target.emplace(o.device);
  IsolatedAllocator allocator(device, limit);
  struct Budgeted {  // the runtime on for these steps, off again however they end
    const Device& d;
    bool on;
    Budgeted(const Device& dev, const std::optional<budget::Options>& b, int64_t limit) : d(dev), on(b.has_value()) {
      if (!on) return;
      set_caching(d, false);  // the limit binds on the bytes handed out, not on cached segments
      budget::Options options = *b;
      options.limit = limit;
      budget::enable(d, options);
      budget::reset_stats(d);
    }
    ~Budgeted() {
      if (on) budget::disable(d);
    }
  } budgeted(device, o.budget, limit);
  std::optional<TraceRecorder> recorder;
  if (recorded) recorder.emplace(device, &recorded->trace);
  auto mark = [recorded] {
    if (recorded)
      recorded->starts.push_back(recorded->trace.events.size()), recorded->ids.push_back(recorded->trace.allocations);
  };
  StepContext ctx = given;
  ctx.device = device;
  StepReport r;
  r.device = device;
  r.target = device.is_meta() ? o.device : device.type;
  std::vector<std::string> layouts;  // after steps 1, 2, ...
  try {
    const Step step = program(ctx);
    r.build_peak = memory_stats(device).peak_allocated;
    for (int64_t k = 1;; ++k) {
      r.steps = k;
      reset_peak(device);
      FlopCounter flops;
      const double modeled = o.budget ? budget::stats(device).modeled_seconds : 0;
      if (o.budget) budget::begin_step(device);  // a per-tensor plan's storages are counted per step
      mark();
      const auto t0 = std::chrono::steady_clock::now();
      step();
      if (!device.is_meta()) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.step_seconds = k <= 2 ? seconds : std::min(r.step_seconds, seconds);
      }
      if (o.budget) r.modeled_step_seconds = budget::stats(device).modeled_seconds - modeled;
      record_step(r, memory_stats(device), flops);
      if (k == 1) r.first_peak = r.peak;
      if (!o.settle_reserved && recorded && k >= 3 && o.steps == 0) {
        mark();
        uint64_t period;
        if (recorded->periodic(&period)) {
          r.periodic = true;
          break;
        }
        recorded->starts.pop_back(), recorded->ids.pop_back();
      }
      if (o.steps > 0) {
        if (k == o.steps) break;
        continue;
      }
      std::string now = layout(device);
      if (std::find(layouts.begin(), layouts.end(), now) != layouts.end()) {
        r.steady = true;
        break;
      }
      if (k == o.max_steps) break;
      layouts.push_back(std::move(now));
    }
    if (!r.periodic) mark();
  } catch (const OutOfMemoryError& e) {
    r.out_of_memory = true;
    r.oom_message = e.what();
    r.oom_fragmentation = e.fragmentation();
  }
  if (o.budget) {
    r.budget = budget::stats(device);
    for (int remat = 0; remat < 2; ++remat)
      for (int offload = 0; offload < 4; ++offload)
        r.floors[remat][offload] = budget::floor(device, budget::Remat(remat), budget::Offload(offload));
  }
  return r;
}

// -1 when the steps run under `limit`, else the step that ran out of memory (0: building the program).
int64_t fails_at(const Program& program, const StepContext& ctx, const PlanOptions& o, int64_t limit) {
  const StepReport r = run_steps(program, ctx, o, kMeta, limit);
  return r.out_of_memory ? r.steps : -1;
}

// What fails_at finds, from the recorded requests of a run without a limit served again under
// `limit`, step by step to the steady state as run_steps goes (a layout that repeats, up to owner
// labels, which decide nothing), without running the program: a deterministic program asks for the
// same bytes in the same order under any limit until one fails. nullopt when it would need a step
// past the recorded ones that the recording does not show to be periodic.
std::optional<int64_t> replay_fails_at(const Recorded& rec, const PlanOptions& o, int64_t limit) {
  uint64_t period = 0;
  const bool periodic = rec.periodic(&period);
  const size_t recorded = rec.steps();
  MetaTargetGuard target(o.device);
  IsolatedAllocator allocator(kMeta, limit);
  TraceReplayer replay(kMeta);
  if (!replay.run(rec.trace, 0, rec.starts[0])) return 0;
  std::vector<std::string> layouts;
  for (int64_t k = 1;; ++k) {
    bool served;
    if (size_t(k) <= recorded) {
      served = replay.run(rec.trace, rec.starts[size_t(k) - 1], rec.starts[size_t(k)]);
    } else {
      if (!periodic) return std::nullopt;
      served = replay.run(rec.trace, rec.starts[recorded - 1], rec.starts[recorded], (uint64_t(k) - recorded) * period);
    }
    if (!served) return k;
    if (o.steps > 0) {
      if (k == o.steps) return -1;
      continue;
    }
    std::string now = layout(kMeta);
    if (std::find(layouts.begin(), layouts.end(), now) != layouts.end() || k == o.max_steps) return -1;
    layouts.push_back(std::move(now));
  }
}

}  // namespace

bool StepReport::fits(int64_t budget) const { return !out_of_memory && reserved <= budget; }

StepReport plan(const Program& program, const StepContext& ctx, const PlanOptions& o) {
  GeneratorStateGuard rng;  // initialisation and dropout on meta still draw counters: give them back
  // The limit's search serves the recorded requests again rather than running the program each time,
  // except under the budget runtime, whose evictions depend on the limit.
  Recorded rec;
  const bool replay = o.smallest_limit && o.settle_reserved && o.replay_search && !o.budget;
  const bool record = replay || (!o.settle_reserved && !o.budget);
  StepReport r = run_steps(program, ctx, o, kMeta, o.memory_limit, record ? &rec : nullptr);
  if (!o.smallest_limit || !o.settle_reserved || r.out_of_memory) return r;
  auto fails = [&](int64_t limit) {
    if (replay)
      if (const std::optional<int64_t> at = replay_fails_at(rec, o, limit)) return *at;
    return fails_at(program, ctx, o, limit);
  };
  // Bisection over multiples of the granule: `lo` fails, `hi` runs. Below the largest allocated peak
  // nothing can run; at the reserved peak the run is this one.
  int64_t lo = std::max(r.peak, r.first_peak) - kGranule, hi = r.reserved;
  if (o.budget) {  // the runtime's floor in its mode is where the search starts
    const budget::Floor& f = r.floors[o.budget->remat == budget::Remat::Dynamic][int(o.budget->offload)];
    lo = std::min(lo, (f.bytes + kGranule - 1) / kGranule * kGranule - kGranule);
    hi = std::max(hi, r.peak);
  }
  while (hi - lo > kGranule) {
    const int64_t mid = lo + (hi - lo) / 2 / kGranule * kGranule;
    const int64_t step = fails(mid);
    if (step >= 0)
      lo = mid, r.below_limit_fails_at = step;
    else
      hi = mid;
  }
  r.smallest_limit = hi;
  if (r.below_limit_fails_at < 0) r.below_limit_fails_at = fails(lo);  // lo was never run
  return r;
}

StepReport measure(const Program& program, const StepContext& ctx, const PlanOptions& o) {
  MG_CHECK(!ctx.device.is_meta(), ValueError, "plan::measure: expected a cpu or cuda device, got meta (use plan())");
  return run_steps(program, ctx, o, ctx.device, o.memory_limit);
}

bool fits(const Program& program, const StepContext& ctx, int64_t budget, const PlanOptions& o) {
  GeneratorStateGuard rng;
  return fails_at(program, ctx, o, budget) < 0;
}

std::vector<OutsideBytes> outside_allocator(DeviceType device) {
  if (device != DeviceType::CUDA) return {};
  // cuBLAS's figures are its documentation's recommendation for the workspace of one handle
  // (cublasSetWorkspace): 32 MiB on Hopper (sm90), 4 MiB before. memgrad does not set one, so cuBLAS
  // allocates it itself. The context depends on the driver and the GPU.
  return {{"CUDA context (driver, kernels' code)", -1},
          {"cuBLAS handle workspace, sm90 (4 MiB before sm90)", int64_t(32) << 20},
          {"cuDNN handle and its convolution workspaces", -1}};
}

std::string StepReport::str() const {
  std::ostringstream os;
  os << "peak " << format_bytes(peak) << " (" << peak << " B) allocated, " << format_bytes(reserved) << " (" << reserved
     << " B) reserved";
  if (smallest_limit) os << ", runs under a limit of " << smallest_limit << " B";
  os << " on " << device.str()
     << (device.is_meta() ? std::string(" for ") + (target == DeviceType::CUDA ? "cuda" : "cpu") : "") << ", " << steps
     << " step" << (steps == 1 ? "" : "s") << (steady ? " (steady)" : "") << (out_of_memory ? ", OUT OF MEMORY" : "")
     << "\n";
  for (int c = 0; c < kNumCategories; ++c)
    if (at_peak[size_t(c)])
      os << "  " << category_name(Category(c)) << ": " << format_bytes(at_peak[size_t(c)]) << "\n";
  std::vector<std::pair<std::string, int64_t>> owners(at_peak_by_owner.begin(), at_peak_by_owner.end());
  std::sort(owners.begin(), owners.end(), [](auto& a, auto& b) { return a.second > b.second; });
  for (size_t i = 0; i < std::min<size_t>(owners.size(), 8); ++i)
    os << "  owner " << owners[i].first << ": " << format_bytes(owners[i].second) << "\n";
  os << "FLOPs " << flops << ", recomputed " << recompute_flops << "\n";
  return os.str();
}

// ---- the built-in models

Program program(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step) {
  return [model, input, step](const StepContext& ctx) -> Step {
    // Data parallelism builds the model deferred: each rank materializes what it holds (nn/deferred.h).
    auto chain = std::make_shared<train::ChainModel>(model, ctx.device, step.data_parallel());
    train::StepOptions o = step;
    o.units = chain->unit_names();
    auto trainer = std::make_shared<train::Trainer>(chain->module(), o);
    train::InputShape shape = input;
    shape.batch = ctx.batch;
    const train::Policy policy = ctx.policy;
    return [chain, trainer, shape, policy] {
      train::train_step(
          *chain, *trainer, [&](int64_t) { return chain->zero_inputs(shape); }, policy);
    };
  };
}

StepContext context(const train::InputShape& input, const train::Policy& policy) {
  StepContext ctx;
  ctx.batch = input.batch;
  ctx.policy = policy;
  return ctx;
}

StepReport plan(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                const train::Policy& policy, const PlanOptions& options) {
  return plan(program(model, input, step), context(input, policy), options);
}

StepReport run_step(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                    const train::Policy& policy, const Device& device) {
  StepContext ctx = context(input, policy);
  ctx.device = device;
  return measure(program(model, input, step), ctx);
}

struct StepRunner::Impl {
  Device device;
  MemoryStats before;
  std::map<std::string, int64_t> owners_before;
  std::optional<train::ChainModel> chain;
  std::optional<train::Trainer> trainer;
  train::InputShape input;
};

StepRunner::StepRunner(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                       const Device& device)
    : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->before = memory_stats(device);
  impl_->owners_before = memory_by_owner(device);
  impl_->chain.emplace(model, device);
  impl_->trainer.emplace(impl_->chain->module(), step);
  impl_->input = input;
}

StepRunner::~StepRunner() = default;

StepReport StepRunner::step(const train::Policy& policy) {
  Impl& m = *impl_;
  reset_peak(m.device);
  FlopCounter flops;
  train::train_step(
      *m.chain, *m.trainer, [&m](int64_t) { return m.chain->zero_inputs(m.input); }, policy);
  StepReport r;
  r.device = m.device;
  r.target = m.device.type;
  r.steps = 1;
  MemoryStats s = memory_stats(m.device);
  s.peak_allocated -= m.before.allocated;
  s.peak_reserved -= m.before.reserved;
  for (size_t c = 0; c < size_t(kNumCategories); ++c) {
    s.at_peak_by_category[c] -= m.before.by_category[c];
    s.peak_by_category[c] -= m.before.by_category[c];
  }
  for (auto& [owner, bytes] : s.at_peak_by_owner) {
    auto it = m.owners_before.find(owner);
    bytes -= it == m.owners_before.end() ? 0 : it->second;
  }
  record_step(r, s, flops);
  r.first_peak = r.peak;
  return r;
}

// ---- the largest batch

int64_t largest_batch(const Program& program, const StepContext& ctx, int64_t budget, const PlanOptions& options,
                      int64_t max_batch) {
  return largest_fitting(max_batch, [&](int64_t b) {
    StepContext c = ctx;
    c.batch = b;
    return fits(program, c, budget, options);
  });
}

int64_t largest_fitting(int64_t max_k, const std::function<bool(int64_t)>& fits) {
  if (max_k < 1 || !fits(1)) return 0;
  int64_t lo = 1, hi = 2;  // lo fits; hi does not, or is past max_k
  while (hi <= max_k && fits(hi)) lo = hi, hi *= 2;
  hi = std::min(hi, max_k + 1);
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

int64_t largest_batch(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                      const train::Policy& policy, int64_t budget, const PlanOptions& options, int64_t max_batch) {
  return largest_batch(program(model, input, step), context(input, policy), budget, options, max_batch);
}

}  // namespace mg::plan
