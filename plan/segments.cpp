// Choosing checkpoint segments: per-block costs measured on meta through the chain's probe, the
// step's cost model, three choosers, and the verification of each choice under the budget.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <memgrad/core/error.h>
#include <memgrad/core/random.h>
#include <memgrad/plan/probe_impl.h>

namespace mg::plan {

namespace {

// The phases of one instrumented step (after an ordinary one, so the optimizer state exists, unless
// `warm` is false): every block kept, or all of them in one segment.
detail::Phases measure_phases(const Program& program, const StepContext& given, const PlanOptions& o, bool one_segment,
                              bool warm = true) {
  MetaTargetGuard target(o.device);
  IsolatedAllocator allocator(kMeta);
  StepContext ctx = given;
  ctx.device = kMeta;
  ctx.policy = train::Policy::none();

  const Step step = program(ctx);
  if (warm) step();
  reset_peak(kMeta);
  detail::ChainProbe probe(one_segment);
  step();
  detail::Phases& p = probe.phases;
  MG_CHECK(p.n >= 1, ValueError,
           "plan: the program runs no chain of blocks; run its blocks through train::run_chain to choose segments");
  probe.close(p.backward0_hooked ? p.rest : p.backward[0]);  // block 0's backward has no hook without one
  return p;
}

// Bytes the blocks before `i` hold under `p` (kept blocks: their saved tensors and output;
// segments: their output), for every i in [0, n].
std::vector<int64_t> prefix_bytes(const BlockCosts& c, const train::Policy& p, std::vector<int64_t>* segment_end) {
  segment_end->assign(size_t(c.n), -1);
  for (auto& s : p.segments) (*segment_end)[size_t(s.begin)] = s.end;
  std::vector<int64_t> prefix(size_t(c.n + 1), 0);
  for (int64_t i = 0; i < c.n;) {
    const int64_t end = (*segment_end)[size_t(i)] > 0 ? (*segment_end)[size_t(i)] : i + 1;
    const int64_t add = (*segment_end)[size_t(i)] > 0 ? c.output_bytes : c.block_bytes;
    for (int64_t k = i + 1; k <= end; ++k) prefix[size_t(k)] = prefix[size_t(i)] + (k == end ? add : 0);
    i = end;
  }
  return prefix;
}

// The events a kept block i or a segment [s, e) adds, given what the blocks before it hold.
int64_t kept_events(const BlockCosts& c, int64_t i, int64_t held) {
  return held + std::max(c.forward_kept, c.backward_kept[size_t(i)] + c.block_bytes);
}
int64_t segment_events(const BlockCosts& c, int64_t s, int64_t e, int64_t held) {
  int64_t worst = c.forward_segment;
  for (int64_t k = s; k < e; ++k) worst = std::max(worst, c.backward_segment[size_t(k)] + (k - s + 1) * c.block_bytes);
  // Recomputing block e-1 with blocks [s, e-1) already back; the gradients of the blocks after the
  // segment exist (backward_kept's fall from e-1 to n-1 measures them).
  const int64_t grads = c.backward_kept[size_t(e - 1)] - c.backward_kept[size_t(c.n - 1)];
  return held + std::max(worst, c.recompute + grads + (e - 1 - s) * c.block_bytes);
}
}  // namespace

BlockCosts measure_block_costs(const Program& program, const StepContext& ctx, const PlanOptions& o) {
  GeneratorStateGuard rng;  // meta runs draw counters too: give them back
  const detail::Phases kept = measure_phases(program, ctx, o, false), seg = measure_phases(program, ctx, o, true);
  BlockCosts c;
  c.n = kept.n;
  c.input_bytes = kept.input_bytes;
  c.forward_flops = kept.forward_flops;
  const int64_t h = kept.block_bytes;
  c.held_bytes = c.block_bytes = h;
  c.output_bytes = kept.output_bytes;
  c.constant = std::max({kept.head, kept.rest, seg.head, seg.rest});
  c.tail = kept.tail - c.n * h;
  c.backward_kept.resize(size_t(c.n)), c.backward_segment.resize(size_t(c.n));
  for (int64_t i = 0; i < c.n; ++i) {
    c.forward_kept = std::max(c.forward_kept, kept.forward[size_t(i)] - i * h);
    c.forward_segment = std::max(c.forward_segment, seg.forward[size_t(i)]);
    c.backward_kept[size_t(i)] = kept.backward[size_t(i)] - (i + 1) * h;
    c.backward_segment[size_t(i)] = seg.backward[size_t(i)] - (i + 1) * h;
    c.recompute = std::max(c.recompute, seg.recompute[size_t(i)] - i * h);
  }
  c.tail_after_segment = seg.tail - c.output_bytes;
  c.overhead = predicted_peak(c, train::Policy::none()) - c.n * h;
  return c;
}

BlockCosts measure_block_costs(const train::ModelSpec& model, const train::InputShape& input,
                               const train::StepOptions& step) {
  return measure_block_costs(program(model, input, step), context(input));
}

int64_t measure_held_bytes(const train::ModelSpec& model, const train::InputShape& input,
                           const train::StepOptions& step) {
  GeneratorStateGuard rng;
  // What a block's forward keeps does not depend on the optimizer state: the first step's probe will do.
  return measure_phases(program(model, input, step), context(input), {}, false, false).block_bytes;
}

int64_t predicted_peak(const BlockCosts& c, const train::Policy& p) {
  std::vector<int64_t> segment_end;
  const std::vector<int64_t> prefix = prefix_bytes(c, p, &segment_end);
  const bool last_in_segment =
      std::any_of(p.segments.begin(), p.segments.end(), [&](const train::Segment& s) { return s.end == c.n; });
  int64_t worst = std::max(c.constant, (last_in_segment ? c.tail_after_segment : c.tail) + prefix[size_t(c.n)]);
  for (int64_t i = 0; i < c.n;) {
    const int64_t e = segment_end[size_t(i)];
    worst = std::max(worst, e > 0 ? segment_events(c, i, e, prefix[size_t(i)]) : kept_events(c, i, prefix[size_t(i)]));
    i = e > 0 ? e : i + 1;
  }
  return worst;
}
double recompute_flops(const BlockCosts& c, const train::Policy& p) {
  return double(p.recomputed_blocks()) * c.forward_flops;
}

train::Policy choose_sqrt_n(const BlockCosts& c) { return train::Policy::sqrt_n(c.n); }

train::Policy choose_chen_greedy(const BlockCosts& c, int64_t budget) {
  std::optional<train::Policy> best;
  auto better = [&](const train::Policy& p) {
    if (!best) return true;
    bool fits = predicted_peak(c, p) <= budget, best_fits = predicted_peak(c, *best) <= budget;
    if (fits != best_fits) return fits;
    if (!fits) return predicted_peak(c, p) < predicted_peak(c, *best);
    return recompute_flops(c, p) < recompute_flops(c, *best) ||
           (recompute_flops(c, p) == recompute_flops(c, *best) && predicted_peak(c, p) < predicted_peak(c, *best));
  };
  for (int64_t k = 1; k <= c.n; ++k) {  // b = k blocks' held bytes
    const int64_t b = k * c.held_bytes;
    train::Policy p{"Chen greedy", {}, false};
    int64_t temp = 0, begin = 0;
    for (int64_t i = 0; i < c.n; ++i) {
      temp += c.held_bytes;
      if (temp >= b || i + 1 == c.n) {
        p.segments.push_back({begin, i + 1});
        begin = i + 1, temp = 0;
      }
    }
    if (p.segments.size() > 1) p.segments.pop_back();  // the last segment's backward follows its forward at once
    if (better(p)) best = p;
  }
  return *best;
}

train::Policy choose_dp(const BlockCosts& c, int64_t budget) {
  // State after blocks [0, i): the bytes they hold (all events ahead grow with it). Value: fewest
  // recomputed blocks, and the step that reached it. Every event of a block or segment is checked
  // when the step is taken, so a plan the DP returns has predicted_peak <= budget, and the one with
  // the fewest recomputed blocks among those.
  struct Entry {
    int64_t recomputed;
    int64_t from_held;
    int64_t segment_begin;  // -1: block i-1 kept
  };
  std::vector<std::map<int64_t, Entry>> dp(size_t(c.n + 1));
  if (c.constant <= budget) dp[0][0] = {0, 0, -1};
  auto relax = [&](int64_t i, int64_t held, Entry e) {
    // The tail runs after the last block, with everything the chain holds.
    if (i == c.n && (e.segment_begin >= 0 ? c.tail_after_segment : c.tail) + held > budget) return;
    auto it = dp[size_t(i)].find(held);
    if (it == dp[size_t(i)].end() || e.recomputed < it->second.recomputed) dp[size_t(i)][held] = e;
  };
  for (int64_t i = 0; i < c.n; ++i) {
    // Drop dominated states: more held and no fewer recomputed blocks.
    int64_t best = INT64_MAX;
    for (auto it = dp[size_t(i)].begin(); it != dp[size_t(i)].end();) {
      if (it->second.recomputed >= best) {
        it = dp[size_t(i)].erase(it);
      } else {
        best = it->second.recomputed;
        ++it;
      }
    }
    for (auto& [held, e] : dp[size_t(i)]) {
      if (kept_events(c, i, held) <= budget) relax(i + 1, held + c.block_bytes, {e.recomputed, held, -1});
      for (int64_t j = i + 1; j <= c.n; ++j)
        if (segment_events(c, i, j, held) <= budget) relax(j, held + c.output_bytes, {e.recomputed + (j - i), held, i});
    }
  }
  std::optional<int64_t> end;
  for (auto& [held, e] : dp[size_t(c.n)]) {
    if (!end || e.recomputed < dp[size_t(c.n)][*end].recomputed) end = held;
  }
  if (!end) {
    train::Policy p = train::Policy::every_block(c.n);
    p.name = "DP (nothing fits: every block)";
    return p;
  }
  train::Policy p{"DP", {}, false};
  int64_t held = *end;
  for (int64_t i = c.n; i > 0;) {
    const Entry& e = dp[size_t(i)].at(held);
    if (e.segment_begin >= 0) {
      p.segments.insert(p.segments.begin(), train::Segment{e.segment_begin, i});
      i = e.segment_begin;
    } else {
      --i;
    }
    held = e.from_held;
  }
  return p;
}

std::vector<ChoiceRow> choose_segments(const Program& program, const StepContext& ctx, int64_t budget,
                                       const PlanOptions& options) {
  const BlockCosts c = measure_block_costs(program, ctx, options);
  PlanOptions under = options;
  under.memory_limit = budget, under.smallest_limit = false;
  auto row = [&](const std::string& method, const train::Policy& p) {
    StepContext x = ctx;
    x.policy = p;
    const StepReport r = plan(program, x, under);
    // A run that ran out of memory did not finish its step: its FLOPs are the cost model's.
    return ChoiceRow{
        method,          p, predicted_peak(c, p), r, r.out_of_memory ? recompute_flops(c, p) : r.recompute_flops,
        !r.out_of_memory};
  };
  using Chooser = std::function<train::Policy(const BlockCosts&, int64_t)>;
  const std::vector<std::pair<std::string, Chooser>> choosers = {{"Chen greedy", choose_chen_greedy},
                                                                 {"DP", choose_dp}};
  std::vector<ChoiceRow> rows = {row("none", train::Policy::none()), row("sqrt(n)", choose_sqrt_n(c))};
  for (const auto& chooser : choosers) {
    const std::string& method = chooser.first;
    const Chooser& choose = chooser.second;  // named: lambdas cannot capture structured bindings in C++17
    // The allocated target whose choice runs under the budget with the fewest recomputed blocks: the
    // budget itself, else the largest target that works, by bisection between the budget and the
    // lowest target the method meets in the cost model (its least-memory choice). Reserved bytes
    // follow allocated ones closely but not exactly.
    std::map<std::string, ChoiceRow> tried;
    auto at = [&](int64_t target) -> const ChoiceRow& {
      const train::Policy p = choose(c, target);
      auto it = tried.find(p.str());
      if (it == tried.end()) it = tried.emplace(p.str(), row(method, p)).first;
      return it->second;
    };
    auto meets = [&](int64_t target) { return predicted_peak(c, choose(c, target)) <= target; };
    int64_t lowest = budget;  // the lowest target met, by bisection in the cost model alone
    if (meets(budget)) {
      for (int64_t below = 0; lowest - below > kGranule;) {
        const int64_t mid = below + (lowest - below) / 2;
        (meets(mid) ? lowest : below) = mid;
      }
    }
    int64_t fails = budget, works = lowest;
    if (!at(budget).fits && at(lowest).fits) {
      while (fails - works > kGranule) {
        const int64_t mid = works + (fails - works) / 2;
        (at(mid).fits ? works : fails) = mid;
      }
    }
    rows.push_back(at(budget).fits ? at(budget) : at(works));
  }
  rows.push_back(row("every block", train::Policy::every_block(c.n)));
  return rows;
}

std::vector<ChoiceRow> choose_segments(const train::ModelSpec& model, const train::InputShape& input,
                                       const train::StepOptions& step, int64_t budget, const PlanOptions& options) {
  return choose_segments(program(model, input, step), context(input), budget, options);
}

std::optional<ChoiceRow> best_fit(const std::vector<ChoiceRow>& rows) {
  std::optional<ChoiceRow> best;
  for (const ChoiceRow& r : rows)
    if (r.fits && (!best || r.recompute_flops < best->recompute_flops ||
                   (r.recompute_flops == best->recompute_flops && r.planned.reserved < best->planned.reserved)))
      best = r;
  return best;
}

std::string choice_table(const std::vector<ChoiceRow>& rows, int64_t budget) {
  std::ostringstream os;
  char line[256];
  os << "budget " << format_bytes(budget) << " (" << budget << " B), each plan run on meta under it\n";
  std::snprintf(line, sizeof line, "%-12s %14s %14s %14s %16s %5s  %s\n", "method", "predicted B", "allocated B",
                "reserved B", "recompute FLOPs", "fits", "segments");
  os << line;
  for (auto& r : rows) {
    std::snprintf(line, sizeof line, "%-12s %14lld %14s %14s %16.0f %5s  %s\n", r.method.c_str(),
                  static_cast<long long>(r.predicted), r.fits ? std::to_string(r.planned.peak).c_str() : "-",
                  r.fits ? std::to_string(r.planned.reserved).c_str() : "(oom)", r.recompute_flops,
                  r.fits ? "yes" : "no", r.policy.str().c_str());
    os << line;
  }
  return os.str();
}

}  // namespace mg::plan
