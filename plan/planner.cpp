#include <memgrad/plan/planner.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>

#include <memgrad/autograd/checkpoint.h>
#include <memgrad/core/autocast.h>
#include <memgrad/core/error.h>
#include <memgrad/core/flops.h>
#include <memgrad/core/random.h>
#include <memgrad/nn/loss.h>
#include <memgrad/optim/adam.h>
#include <memgrad/optim/sgd.h>

namespace mg::plan {

Policy Policy::none() { return {}; }
Policy Policy::every_block(int64_t n) {
  Policy p{"every block", {}, false};
  for (int64_t i = 0; i < n; ++i) p.segments.push_back({i, i + 1});
  return p;
}
Policy Policy::uniform(int64_t n, int64_t k) {
  MG_CHECK(k >= 1 && k <= std::max<int64_t>(n, 1), ValueError, "plan::Policy::uniform: expected 1 <= k <= ", n,
           " segments, got ", k);
  Policy p{std::to_string(k) + " segments", {}, false};
  for (int64_t j = 0; j < k && n > 0; ++j) p.segments.push_back({j * n / k, (j + 1) * n / k});
  return p;
}
Policy Policy::sqrt_n(int64_t n) {
  Policy p = uniform(n, std::max<int64_t>(1, std::llround(std::sqrt(double(n)))));
  p.name = "sqrt(n)";
  return p;
}
Policy Policy::selective_only() { return {"selective", {}, true}; }
int64_t Policy::recomputed_blocks() const {
  int64_t r = 0;
  for (auto& s : segments) r += s.end - s.begin;
  return r;
}
std::string Policy::str() const {
  if (segments.empty()) return selective ? "selective" : "-";
  std::ostringstream os;
  for (size_t i = 0; i < segments.size(); ++i)
    os << (i ? " " : "") << "[" << segments[i].begin << "," << segments[i].end << ")";
  return os.str();
}

ModelSpec ModelSpec::mlp(int64_t layers, int64_t width) {
  ModelSpec m;
  m.kind = Kind::MLP, m.mlp_layers = layers, m.mlp_width = width;
  return m;
}
ModelSpec ModelSpec::gpt_model(const nn::GPTConfig& config) {
  ModelSpec m;
  m.kind = Kind::GPT, m.gpt = config;
  return m;
}

std::unique_ptr<optim::Optimizer> make_optimizer(OptimizerKind kind, const nn::NamedTensors& params) {
  switch (kind) {
    case OptimizerKind::None:
      return nullptr;
    case OptimizerKind::SGD:
      return std::make_unique<optim::SGD>(params, optim::SGDOptions(1e-3));
    case OptimizerKind::SGDMomentum:
      return std::make_unique<optim::SGD>(params, optim::SGDOptions(1e-3).momentum(0.9));
    case OptimizerKind::Adam:
      return std::make_unique<optim::Adam>(params);
    case OptimizerKind::AdamW:
      return std::make_unique<optim::AdamW>(params);
  }
  return nullptr;
}

namespace {

int64_t rounded(int64_t bytes) { return (bytes + 511) / 512 * 512; }

}  // namespace

struct StepRunner::Impl {
  Device device;
  StepOptions options;
  MemoryStats before;
  std::map<std::string, int64_t> owners_before;
  std::optional<ChainModel> chain;
  Tensor x, target;
  std::unique_ptr<distributed::ProcessGroup> group;  // data parallelism: a simulated rank on meta
  std::unique_ptr<distributed::DataParallel> dp;
  std::unique_ptr<optim::Optimizer> opt;
  std::optional<amp::GradScaler> scaler;
};

StepRunner::StepRunner(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Device& device)
    : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->options = step;
  impl_->before = memory_stats(device);
  impl_->owners_before = memory_by_owner(device);
  impl_->chain.emplace(model, device);
  std::tie(impl_->x, impl_->target) = impl_->chain->zero_inputs(input);
  nn::NamedTensors params = impl_->chain->module().named_parameters();
  if (step.data_parallel()) {
    MG_CHECK(step.world_size >= 1 && step.rank >= 0 && step.rank < step.world_size, ValueError,
             "plan: expected 0 <= rank < world_size, got rank ", step.rank, " of ", step.world_size);
    impl_->group = distributed::simulated_group(int(step.rank), int(step.world_size));
    impl_->dp = std::make_unique<distributed::DataParallel>(
        params, *impl_->group,
        distributed::DataParallelOptions().zero_stage(step.zero_stage).bucket_bytes(step.bucket_bytes));
    params = impl_->dp->optimizer_parameters();
  }
  impl_->opt = make_optimizer(step.optimizer, params);
  if (step.grad_scaler) impl_->scaler.emplace();
}

StepRunner::~StepRunner() = default;

StepReport StepRunner::step(const Policy& policy) {
  Impl& m = *impl_;
  m.chain->module().zero_grad();  // the previous step's gradients go before the peak is reset
  if (m.dp) m.dp->zero_grad();
  reset_peak(m.device);
  FlopCounter flops;
  train_step(
      *m.chain, m.opt.get(), m.scaler ? &*m.scaler : nullptr, [&m](int64_t) { return std::make_pair(m.x, m.target); },
      policy, m.options, m.dp.get());
  StepReport r;
  r.device = m.device;
  const MemoryStats s = memory_stats(m.device);
  r.peak = s.peak_allocated - m.before.allocated;
  for (size_t c = 0; c < size_t(kNumCategories); ++c) {
    r.at_peak[c] = s.at_peak_by_category[c] - m.before.by_category[c];
    r.category_peak[c] = s.peak_by_category[c] - m.before.by_category[c];
  }
  for (auto& [owner, bytes] : s.at_peak_by_owner) {
    auto it = m.owners_before.find(owner);
    int64_t b = bytes - (it == m.owners_before.end() ? 0 : it->second);
    if (b) r.at_peak_by_owner[owner] = b;
  }
  r.flops = flops.total();
  r.recompute_flops = flops.recompute();
  return r;
}

StepReport run_step(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Policy& policy,
                    const Device& device) {
  MG_CHECK(step.steps >= 1, ValueError, "plan: expected StepOptions::steps >= 1, got ", step.steps);
  StepRunner runner(model, input, step, device);
  for (int64_t i = 1; i < step.steps; ++i) runner.step(policy);
  return runner.step(policy);
}

StepReport plan(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Policy& policy) {
  GeneratorStateGuard rng;  // initialisation and dropout on meta still draw counters: give them back
  return run_step(model, input, step, policy, kMeta);
}

std::string StepReport::str() const {
  std::ostringstream os;
  os << "peak " << format_bytes(peak) << " (" << peak << " B) on " << device.str() << "\n";
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

// ---- choosing segments

namespace {
// Phase peaks of one instrumented meta step: every block kept (one_segment false) or all blocks in
// one segment [0, n). A mark closes a phase: it records the peak since the previous mark and starts
// a new one. Marks sit after each block's forward (and each block's recompute), and in gradient
// hooks on each block's output, which run just before that block's backward.
struct Phases {
  int64_t head = 0, tail = 0, rest = 0;  // head forward; tail forward + backward; head backward + step
  std::vector<int64_t> forward, backward, recompute;
  int64_t block_bytes = 0;   // allocated bytes added by one kept block's forward (its saved tensors + output)
  int64_t output_bytes = 0;  // a block's output, rounded
};

Phases measure_phases(const ModelSpec& model, const InputShape& input, const StepOptions& step, bool one_segment) {
  const int64_t n = model.num_blocks();
  const int64_t base = memory_stats(kMeta).allocated;
  ChainModel chain(model, kMeta);
  auto [x, target] = chain.zero_inputs(input);
  auto opt = make_optimizer(step.optimizer, chain.module().named_parameters());
  std::optional<DType> half = autocast_dtype(step.precision);
  for (int64_t s = 1; s < step.steps; ++s) {  // earlier steps, as run_step runs them
    chain.module().zero_grad();
    Tensor loss;
    {
      std::optional<amp::AutocastGuard> autocast;
      if (half) autocast.emplace(*half);
      loss = chain.loss(x, target, Policy::none());
    }
    loss.backward();
    if (opt) opt->step();
  }
  chain.module().zero_grad();
  reset_peak(kMeta);
  Phases p;
  p.forward.assign(size_t(n), 0), p.backward.assign(size_t(n), 0), p.recompute.assign(size_t(n), 0);
  auto mark = [base]() {
    const int64_t v = memory_stats(kMeta).peak_allocated - base;
    reset_peak(kMeta);
    return v;
  };
  // The hook on block i's output closes the phase before block i's backward: block i + 1's backward
  // (with its recompute, when in a segment), or the tail for the last block.
  int calls = 0;  // the segment's runs; outlives backward, which calls the segment again
  auto close_before = [&p, &mark, n](Tensor& out, int64_t i) {
    out.register_hook([&p, &mark, n, i](const Tensor&) {
      (i + 1 == n ? p.tail : p.backward[size_t(i + 1)]) = mark();
      return Tensor();
    });
  };
  bool head_hook = false;
  Tensor loss;
  {
    std::optional<amp::AutocastGuard> autocast;
    if (half) autocast.emplace(*half);
    Tensor h = chain.head(x);
    p.head = mark();
    if (h.requires_grad()) {
      head_hook = true;
      h.register_hook([&p, &mark](const Tensor&) {
        p.backward[0] = mark();
        return Tensor();
      });
    }
    if (!one_segment) {
      const int64_t before = memory_stats(kMeta).allocated;
      for (int64_t i = 0; i < n; ++i) {
        h = chain.block(i, h, false);
        p.forward[size_t(i)] = mark();
        if (i == 0) p.block_bytes = memory_stats(kMeta).allocated - before;
        close_before(h, i);
      }
      p.output_bytes = rounded(h.numel() * int64_t(dtype_size(h.dtype())));
    } else {
      h = checkpoint(
          [&](const Tensor& in) {
            const bool first = ++calls == 1;
            Tensor y = in;
            for (int64_t j = 0; j < n; ++j) {
              y = chain.block(j, y, false);
              (first ? p.forward : p.recompute)[size_t(j)] = mark();
              if (first) close_before(y, j);
            }
            return y;
          },
          h);
    }
    loss = chain.tail(h, target);
  }
  loss.backward();
  (head_hook ? p.rest : p.backward[0]) = mark();
  if (opt) opt->step();
  loss = Tensor();
  p.rest = std::max(p.rest, mark());
  return p;
}

// Bytes the blocks before `i` hold under `p` (kept blocks: their saved tensors and output;
// segments: their output), for every i in [0, n].
std::vector<int64_t> prefix_bytes(const BlockCosts& c, const Policy& p, std::vector<int64_t>* segment_end) {
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

BlockCosts measure_block_costs(const ModelSpec& model, const InputShape& input, const StepOptions& step) {
  BlockCosts c;
  c.n = model.num_blocks();
  MG_CHECK(c.n >= 1, ValueError, "plan::measure_block_costs: expected a model with blocks, got ", c.n);
  GeneratorStateGuard rng;  // meta runs draw counters too: give them back
  {
    ChainModel chain(model, kMeta);
    auto [x, target] = chain.zero_inputs(input);
    std::optional<amp::AutocastGuard> autocast;
    if (auto dt = autocast_dtype(step.precision)) autocast.emplace(*dt);
    Tensor h = chain.head(x);
    // An op output like every block input in the chain (a saved user tensor would stay Input).
    Tensor in = h.requires_grad() ? h : h.detach().requires_grad_() * 1.0;
    c.input_bytes = rounded(in.numel() * int64_t(dtype_size(in.dtype())));
    FlopCounter flops;
    Tensor out = chain.block(0, in, false);
    c.forward_flops = flops.total();
  }
  const Phases kept = measure_phases(model, input, step, false), seg = measure_phases(model, input, step, true);
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
  c.overhead = predicted_peak(c, Policy::none()) - c.n * h;
  return c;
}

int64_t predicted_peak(const BlockCosts& c, const Policy& p) {
  std::vector<int64_t> segment_end;
  const std::vector<int64_t> prefix = prefix_bytes(c, p, &segment_end);
  const bool last_in_segment =
      std::any_of(p.segments.begin(), p.segments.end(), [&](const Segment& s) { return s.end == c.n; });
  int64_t worst = std::max(c.constant, (last_in_segment ? c.tail_after_segment : c.tail) + prefix[size_t(c.n)]);
  for (int64_t i = 0; i < c.n;) {
    const int64_t e = segment_end[size_t(i)];
    worst = std::max(worst, e > 0 ? segment_events(c, i, e, prefix[size_t(i)]) : kept_events(c, i, prefix[size_t(i)]));
    i = e > 0 ? e : i + 1;
  }
  return worst;
}
double recompute_flops(const BlockCosts& c, const Policy& p) { return double(p.recomputed_blocks()) * c.forward_flops; }

Policy choose_sqrt_n(const BlockCosts& c) { return Policy::sqrt_n(c.n); }

Policy choose_chen_greedy(const BlockCosts& c, int64_t budget) {
  std::optional<Policy> best;
  auto better = [&](const Policy& p) {
    if (!best) return true;
    bool fits = predicted_peak(c, p) <= budget, best_fits = predicted_peak(c, *best) <= budget;
    if (fits != best_fits) return fits;
    if (!fits) return predicted_peak(c, p) < predicted_peak(c, *best);
    return recompute_flops(c, p) < recompute_flops(c, *best) ||
           (recompute_flops(c, p) == recompute_flops(c, *best) && predicted_peak(c, p) < predicted_peak(c, *best));
  };
  for (int64_t k = 1; k <= c.n; ++k) {  // b = k blocks' held bytes
    const int64_t b = k * c.held_bytes;
    Policy p{"Chen greedy", {}, false};
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

Policy choose_dp(const BlockCosts& c, int64_t budget) {
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
    Policy p = Policy::every_block(c.n);
    p.name = "DP (nothing fits: every block)";
    return p;
  }
  Policy p{"DP", {}, false};
  int64_t held = *end;
  for (int64_t i = c.n; i > 0;) {
    const Entry& e = dp[size_t(i)].at(held);
    if (e.segment_begin >= 0) {
      p.segments.insert(p.segments.begin(), Segment{e.segment_begin, i});
      i = e.segment_begin;
    } else {
      --i;
    }
    held = e.from_held;
  }
  return p;
}

std::vector<ChoiceRow> choose_segments(const ModelSpec& model, const InputShape& input, const StepOptions& step,
                                       int64_t budget) {
  const BlockCosts c = measure_block_costs(model, input, step);
  using Chooser = std::function<Policy(const BlockCosts&, int64_t)>;
  const std::vector<std::pair<std::string, Chooser>> methods = {
      {"sqrt(n)", [](const BlockCosts& costs, int64_t) { return choose_sqrt_n(costs); }},
      {"Chen greedy", choose_chen_greedy},
      {"DP", choose_dp}};
  std::vector<ChoiceRow> rows;
  for (const auto& [method, choose] : methods) {
    int64_t target = budget;
    Policy policy = choose(c, target);
    StepReport r = plan(model, input, step, policy);
    for (int64_t tries = 0; r.peak > budget && tries < c.n && method != "sqrt(n)"; ++tries) {
      target -= r.peak - budget;  // the meta run overshot: ask the cost model for that much less
      Policy tighter = choose(c, target);
      if (tighter.str() == policy.str()) continue;
      policy = tighter;
      r = plan(model, input, step, policy);
    }
    rows.push_back({method, policy, predicted_peak(c, policy), r.peak, r.recompute_flops, r.peak <= budget});
  }
  return rows;
}

std::string choice_table(const std::vector<ChoiceRow>& rows, int64_t budget) {
  std::ostringstream os;
  char line[256];
  os << "budget " << format_bytes(budget) << " (" << budget << " B)\n";
  std::snprintf(line, sizeof line, "%-12s %14s %14s %16s %5s  %s\n", "method", "predicted B", "measured B",
                "recompute FLOPs", "fits", "segments");
  os << line;
  for (auto& r : rows) {
    std::snprintf(line, sizeof line, "%-12s %14lld %14lld %16.0f %5s  %s\n", r.method.c_str(),
                  static_cast<long long>(r.predicted), static_cast<long long>(r.measured), r.recompute_flops,
                  r.fits ? "yes" : "no", r.policy.str().c_str());
    os << line;
  }
  return os.str();
}

int64_t largest_batch(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Policy& policy,
                      int64_t budget, int64_t max_batch) {
  auto fits = [&](int64_t b) {
    InputShape s = input;
    s.batch = b;
    return plan(model, s, step, policy).peak <= budget;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;  // lo fits; hi does not, or is past max_batch
  while (hi <= max_batch && fits(hi)) lo = hi, hi *= 2;
  hi = std::min(hi, max_batch + 1);
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace mg::plan
