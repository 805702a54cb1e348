// The memory budget runtime (core/budget/budget.h): under a limit well below the unconstrained peak,
// training evicts and recomputes (or offloads) and still gives the same losses, gradients and
// parameters, bitwise, with dropout on. Each run starts from the same seed; the allocator's cache
// is off so the limit binds on the bytes handed out (the cache would only add whole segments).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include <memgrad/core/budget/budget.h>
#include <memgrad/core/budget/cell_impl.h>
#include <memgrad/kernels/backend.h>
#include <memgrad/memgrad.h>

#include "expect_error.h"
#include "timeline_page.h"

using namespace mg;

namespace {

struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads, params;
  int64_t peak = 0;
  budget::Stats stats;
};

// Runs `train` (which builds its model and returns the loss of each step and the parameters) on a
// cpu with caching off, under `options` when its limit is set; the ledger must be back where it was.
// A budget on the cpu (cache off) for a scope; the ledger must be back where it was at the end.
struct Budgeted {
  int64_t before;
  explicit Budgeted(budget::Options options) {
    set_caching(kCPU, false);
    before = memory_stats().allocated;
    if (options.limit) budget::enable(kCPU, options);
    budget::reset_stats();
  }
  ~Budgeted() {
    budget::disable(kCPU);
    set_memory_limit(kCPU, 0);
    set_caching(kCPU, true);
    CHECK(memory_stats().allocated == before);  // nothing leaked, evicted or not
  }
};

Outcome run(const std::function<std::vector<double>(std::vector<Tensor>&)>& train, budget::Options options = {}) {
  Budgeted scope(options);
  const int64_t before = scope.before;
  reset_peak();
  Outcome o;
  {
    manual_seed(7);
    std::vector<Tensor> params;
    o.losses = train(params);
    o.peak = memory_stats().peak_allocated - before;
    for (auto& p : params) {
      o.params.push_back(p.to_vector<float>());
      o.grads.push_back(p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>());
    }
  }
  o.stats = budget::stats();
  return o;
}

void check_same(const Outcome& a, const Outcome& b) {
  CHECK(a.losses == b.losses);
  CHECK(a.grads == b.grads);
  CHECK(a.params == b.params);
}

// An MLP with dropout, SGD with momentum, `steps` steps of `micro` accumulated micro-batches.
std::function<std::vector<double>(std::vector<Tensor>&)> mlp(int64_t steps, int64_t micro = 1, bool autocast = false,
                                                             bool checkpointed = false) {
  return [=](std::vector<Tensor>& params) {
    const int64_t width = 64, batch = 1024, layers = 8;
    for (int64_t l = 0; l < layers; ++l) {
      MemoryScope scope(Category::Parameter, "fc" + std::to_string(l));
      params.push_back(randn({width, width}).mul_(0.1).requires_grad_());
      params.push_back(zeros({width}).requires_grad_());
    }
    optim::SGD opt(params, optim::SGDOptions(0.05).momentum(0.9));
    auto block = [&](const Tensor& h, int64_t l) {
      return dropout(relu(linear(h, params[size_t(2 * l)], params[size_t(2 * l + 1)])), 0.2);
    };
    std::vector<double> losses;
    for (int64_t s = 0; s < steps; ++s) {
      opt.zero_grad();
      for (int64_t m = 0; m < micro; ++m) {
        Tensor x = randn({batch, width}), y = randint(0, width, {batch});
        std::optional<amp::AutocastGuard> cast;
        if (autocast) cast.emplace(kBFloat16);
        Tensor h = x;
        for (int64_t l = 0; l < layers; ++l)
          h = checkpointed && l % 2 == 0 ? checkpoint([&, l](const Tensor& v) { return block(v, l); }, h) : block(h, l);
        Tensor loss = cross_entropy(h, y);
        cast.reset();
        losses.push_back(loss.item<double>());
        (loss * (1.0 / double(micro))).backward();
      }
      opt.step();
    }
    return losses;
  };
}

// A small GPT with dropout, AdamW.
std::function<std::vector<double>(std::vector<Tensor>&)> gpt(int64_t steps, int64_t checkpoint_every = 0) {
  return [=](std::vector<Tensor>& params) {
    nn::GPTConfig c;
    c.vocab_size = c.block_size = c.n_embd = 64;
    c.n_layer = 3, c.n_head = 2, c.dropout = 0.1, c.checkpoint_every = checkpoint_every;
    nn::GPT model(c);
    params = model.parameters();
    optim::AdamW opt(params, optim::AdamWOptions(1e-3));
    std::vector<double> losses;
    for (int64_t s = 0; s < steps; ++s) {
      opt.zero_grad();
      Tensor idx = randint(0, 64, {16, 64}), tgt = randint(0, 64, {16, 64});
      Tensor loss = model.loss(idx, tgt);
      losses.push_back(loss.item<double>());
      loss.backward();
      opt.step();
    }
    return losses;
  };
}

budget::Options options(int64_t limit, budget::Remat remat, budget::Offload offload, bool prefetch = true) {
  budget::Options o;
  o.limit = limit, o.remat = remat, o.offload = offload, o.prefetch = prefetch;
  return o;
}

budget::Options at(const Outcome& free_run, double fraction, budget::Offload offload = budget::Offload::None,
                   budget::Remat remat = budget::Remat::Dynamic) {
  budget::Options o;
  o.limit = int64_t(double(free_run.peak) * fraction);
  o.remat = remat;
  o.offload = offload;
  return o;
}

}  // namespace

// What the runtime records comes from kernel_list.h: a kernel writes its `const Out&` parameters, and
// MG_FLOPS prices it (that every kernel writes something is a static_assert in kernels/backend.cpp).
TEST_CASE("budget: a kernel's writes and FLOPs are the kernel list's facts") {
  CHECK(kernels::written_params(kernels::cpu_backend().layer_norm) ==
        std::array<bool, 7>{false, false, false, true, true, true, false});
  CHECK(kernels::written_params(kernels::cpu_backend().copy) == std::array<bool, 2>{false, true});
  Tensor a = zeros({2, 3, 4}), b = zeros({2, 4, 5}), out = zeros({2, 3, 5});
  CHECK(kernels::kernel_flops(&kernels::Backend::matmul, a, b, out) == 2.0 * 2 * 3 * 5 * 4);
  CHECK(kernels::kernel_flops(&kernels::Backend::copy, a, a) == 0);
}

TEST_CASE("budget: the fitted kernel times add up to the measured sum, whichever way the fit goes") {
  struct Kernel {
    double flops, bytes, seconds;
  };
  // Least squares in three rates; bytes that do not vary (the 3x3 system is singular) with a negative
  // intercept (the two-rate fit is refused too, and FLOPs alone over-predict the sum: a loaded
  // machine's measurements did this); and time falling with bytes (a negative byte rate).
  const std::vector<std::vector<Kernel>> cases = {
      {{1e6, 4e5, 2e-4}, {3e6, 1e5, 4e-4}, {2e6, 9e5, 5e-4}, {5e5, 2e6, 4e-4}},
      {{1e6, 100, 0.5e-3}, {2e6, 100, 1.5e-3}, {3e6, 100, 2.5e-3}},
      {{1e6, 1e6, 3e-3}, {2e6, 5e5, 2e-3}, {3e6, 1e5, 1e-3}, {4e6, 1e3, 2e-3}}};
  for (const auto& kernels : cases) {
    budget::impl::KernelFit k;
    for (const Kernel& x : kernels) k.add(x.flops, x.bytes, x.seconds);
    const budget::CostModel m = budget::impl::fit_rates(k, budget::CostModel::fixed());
    CAPTURE(m.str());
    CHECK(m.flops_per_second > 0);
    CHECK(m.bytes_per_second > 0);
    CHECK(m.seconds_per_kernel >= 0);
    double predicted = 0;
    for (const Kernel& x : kernels) predicted += m.kernel_seconds(x.flops, x.bytes);
    CHECK(predicted == doctest::Approx(k.t).epsilon(1e-9));
  }
}

TEST_CASE("budget: the cpu host pool hands freed buffers out again for the same size") {
  // Copies into reused (touched) pages run at the bandwidth enable() measures; fresh pages would
  // fault on every 4 KiB and make an offload's time depend on malloc's history.
  budget::impl::release_host_cache();
  void* first = nullptr;
  {
    auto a = budget::impl::host_alloc(kCPU, 3 << 20);
    first = a.get();
    std::memset(a.get(), 1, 3 << 20);
  }
  auto same = budget::impl::host_alloc(kCPU, 3 << 20);
  CHECK(same.get() == first);
  CHECK(static_cast<const char*>(same.get())[(3 << 20) - 1] == 1);  // the touched pages themselves
  auto other = budget::impl::host_alloc(kCPU, 3 << 20);             // the one cached buffer is taken
  CHECK(other.get() != first);
  same.reset(), other.reset();
  CHECK(budget::impl::host_cache_bytes() == size_t(6 << 20));  // both kept: as many as were out at once
  budget::impl::release_host_cache();
  // Kept bytes never pass the most handed out at once: sizes that vary do not pile up.
  budget::impl::host_alloc(kCPU, 1 << 20).reset();
  budget::impl::host_alloc(kCPU, 2 << 20).reset();  // the 1 MiB one is kept: 3 MiB > the 2 MiB peak
  CHECK(budget::impl::host_cache_bytes() == size_t(1 << 20));
  budget::impl::release_host_cache();
  CHECK(budget::impl::host_cache_bytes() == 0);
}

TEST_CASE("budget: an MLP with dropout under 35% of its peak trains bitwise as without a budget") {
  Outcome free_run = run(mlp(2));
  for (double f : {0.35}) {
    CAPTURE(f);
    Outcome b = run(mlp(2), at(free_run, f));
    check_same(b, free_run);
    CHECK(b.peak <= int64_t(double(free_run.peak) * f));
    CHECK(b.stats.evictions > 0);
    CHECK(b.stats.rematerializations > 0);
    CHECK(b.stats.evicted_bytes[size_t(Category::Activation)] > 0);
  }
}

TEST_CASE("budget: a GPT with dropout under 50% and 40% of its peak trains bitwise as without a budget") {
  Outcome free_run = run(gpt(2));
  for (double f : {0.5, 0.4}) {
    CAPTURE(f);
    Outcome b = run(gpt(2), at(free_run, f));
    check_same(b, free_run);
    CHECK(b.peak <= int64_t(double(free_run.peak) * f));
    CHECK(b.stats.rematerializations > 0);
    CHECK(b.stats.recompute_flops > 0);
  }
}

TEST_CASE("budget: checkpoint segments inside a budget") {
  Outcome free_run = run(gpt(2, 1));
  Outcome b = run(gpt(2, 1), at(free_run, 0.8));
  check_same(b, free_run);
  CHECK(b.stats.evictions > 0);
  Outcome mlp_free = run(mlp(2, 1, false, true));
  check_same(run(mlp(2, 1, false, true), at(mlp_free, 0.5)), mlp_free);
}

TEST_CASE("budget: gradient accumulation and autocast") {
  Outcome accum = run(mlp(2, 2));
  Outcome b = run(mlp(2, 2), at(accum, 0.45));
  check_same(b, accum);
  CHECK(b.stats.evictions > 0);
  Outcome cast = run(mlp(2, 1, true));
  Outcome bc = run(mlp(2, 1, true), at(cast, 0.5));
  check_same(bc, cast);
  CHECK(bc.stats.evictions > 0);
}

TEST_CASE("budget: offloading activations, alone or with recompute, gives the same numbers") {
  Outcome free_run = run(mlp(2));
  Outcome only = run(mlp(2), at(free_run, 0.5, budget::Offload::Activations, budget::Remat::None));
  check_same(only, free_run);
  CHECK(only.stats.offloads > 0);
  CHECK(only.stats.fetches > 0);
  CHECK(only.stats.evictions == 0);
  CHECK(only.stats.prefetches > 0);  // backward fetched saved tensors ahead of their nodes
  CHECK(only.stats.peak_host_bytes > 0);
  CHECK(only.stats.host_bytes == 0);  // the pool is empty again once the tensors are gone
  Outcome both = run(mlp(2), at(free_run, 0.4, budget::Offload::Activations));
  check_same(both, free_run);
  CHECK(both.stats.offloads + both.stats.evictions > 0);
}

TEST_CASE("budget: optimizer-state offload keeps the state in the host pool and steps there") {
  Outcome free_run = run(gpt(2));
  int64_t state_on_device = -1;
  auto train = [&](std::vector<Tensor>& params) {
    auto losses = gpt(2)(params);
    state_on_device = memory_stats().category(Category::OptimizerState);
    return losses;
  };
  budget::Options o = at(free_run, 1.0, budget::Offload::Optimizer);
  Outcome b = run(train, o);
  check_same(b, free_run);
  CHECK(state_on_device == 0);
  CHECK(b.stats.offloaded_bytes[size_t(Category::OptimizerState)] > 0);
  CHECK(b.stats.peak_host_bytes >= b.stats.offloaded_bytes[size_t(Category::OptimizerState)]);
}

TEST_CASE("budget: an in-place write first brings back what was computed from the old value") {
  Budgeted scope(options(memory_stats().allocated + (int64_t(3) << 20), budget::Remat::Dynamic, budget::Offload::None));
  Tensor a = randn({256, 256});  // 256 KiB
  Tensor b = exp(a);
  Tensor expected = b.clone();
  budget::pin(a);
  budget::pin(expected);
  std::vector<Tensor> filler;
  for (int i = 0; i < 10; ++i) {  // 2.5 MiB: b is the only one that can leave
    filler.push_back(zeros({256, 256}));
    budget::pin(filler.back());
  }
  CHECK_FALSE(budget::is_resident(b));
  filler.clear();
  {
    NoGradGuard ng;
    a.add_(1.0);  // b's recipe reads a: b is recomputed from the old a first
  }
  CHECK(budget::is_resident(b));
  CHECK(b.to_vector<float>() == expected.to_vector<float>());
}

TEST_CASE("budget: below the minimum a typed error names it, and the library stays usable") {
  Outcome free_run = run(mlp(1));
  {
    Budgeted scope(
        options(memory_stats().allocated + (int64_t(64) << 10), budget::Remat::Dynamic, budget::Offload::None));
    expect_error<MemoryBudgetError>(
        [&] {
          std::vector<Tensor> params;
          mlp(1)(params);
        },
        {"memory budget of", "needs at least", "set by", "beside what cannot leave: Parameter",
         "Why the cache could not serve it: "});  // the allocator's forensics, as every out-of-memory error
  }
  check_same(run(mlp(1)), free_run);
}

TEST_CASE("budget: the history and the timeline show evictions and rematerializations") {
  Outcome free_run = run(mlp(1));
  record_history(true);
  Outcome b = run(mlp(1), at(free_run, 0.5));
  int64_t evicts = 0, remats = 0;
  for (auto& e : memory_history())
    evicts += e.kind == MemoryEventKind::Evict, remats += e.kind == MemoryEventKind::Remat;
  CHECK(evicts == b.stats.evictions);
  CHECK(remats == b.stats.rematerializations);
  // Each names its block: after an eviction, the block's next event is its free; before a remat, its alloc.
  const std::vector<MemoryEvent> events = memory_history();
  const auto beside = [&](size_t i, size_t step) -> const MemoryEvent* {  // step 1: the next, -1: the previous
    for (size_t k = i + step; k < events.size(); k += step)
      if (events[k].address == events[i].address && events[k].device == events[i].device &&
          events[k].kind != MemoryEventKind::Relabel)
        return &events[k];
    return nullptr;
  };
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind == MemoryEventKind::Evict) CHECK((beside(i, 1) && beside(i, 1)->kind == MemoryEventKind::Free));
    if (events[i].kind == MemoryEventKind::Remat)
      CHECK((beside(i, size_t(-1)) && beside(i, size_t(-1))->kind == MemoryEventKind::Alloc));
  }
  const std::string path = "/tmp/memgrad_budget_timeline.html";
  memory::write_timeline(path);
  record_history(false);
  // The page marks each event, and flags the blocks they happened to.
  const nlohmann::json run = timeline_page::data(timeline_page::read_file(path))["runs"][0];
  std::remove(path.c_str());
  std::map<std::string, int64_t> marks;
  for (auto& k : run["marks"]["kind"]) ++marks[k.get<std::string>()];
  CHECK(marks["evict"] == b.stats.evictions);
  CHECK(marks["remat"] == b.stats.rematerializations);
  int64_t evicted = 0, rematerialized = 0;
  for (auto& f : run["blocks"]["flags"]) evicted += (f.get<int>() & 4) != 0, rematerialized += (f.get<int>() & 16) != 0;
  CHECK(evicted == b.stats.evictions);
  CHECK(rematerialized == b.stats.rematerializations);
  CHECK(budget::stats_report().find("evicted") != std::string::npos);
}

// What a rematerialization leaves behind that no handle refers to (the input of the evicted tensor
// it rebuilt) is needed again only if that tensor is evicted again: it goes before any saved
// tensor, however costly it was to compute. Priced at its own recompute time it outlived the saved
// tensors around it, and rebuilding a chain evicted the links just made (GPT at 40% of its peak:
// 2.5 times the recompute, MLP at 50%: O(n^2) in the chain's length).
TEST_CASE("budget: the leftovers of a rematerialization leave before saved tensors") {
  Budgeted scope(options(memory_stats().allocated + (int64_t(3) << 20), budget::Remat::Dynamic, budget::Offload::None));
  NoGradGuard ng;
  Tensor x = randn({256, 256});  // 256 KiB
  budget::pin(x);
  Tensor h = exp(matmul(x, x));  // the product (costly) has no handle once h exists
  std::vector<Tensor> filler;
  while (budget::is_resident(h)) {
    filler.push_back(zeros({256, 256}));
    budget::pin(filler.back());
  }
  filler.clear();
  Tensor g = exp(x);   // cheap to recompute, and the stalest below
  Tensor s = h.sum();  // brings back the product, then h
  CHECK(budget::is_resident(h));
  const int64_t room = memory_stats().limit - memory_stats().allocated;
  const int64_t remats = budget::stats().rematerializations;
  Tensor more = empty({room / 4 + 1});  // one 256 KiB storage has to leave
  CHECK(budget::is_resident(g));
  CHECK(budget::is_resident(h));
  CHECK(budget::stats().rematerializations == remats);
  CHECK(s.item<float>() == sum(exp(matmul(x, x))).item<float>());  // bitwise
}

// exp saves its output y; sum's backward saves nothing. With y offloaded, backward fetches it while
// it runs sum's node, ahead of exp's, when y fits under the limit then; when it does not, the
// prefetch does nothing (nothing else leaves for it) and exp's kernel fetches y as without prefetch.
TEST_CASE("budget: backward fetches offloaded saved tensors ahead of the node that reads them, within the limit") {
  struct Result {
    budget::Stats stats;
    std::vector<float> grad;
  };
  auto scenario = [](bool prefetch, bool room) {
    Budgeted scope(options(memory_stats().allocated + (int64_t(2) << 20), budget::Remat::None,
                           budget::Offload::Activations, prefetch));
    manual_seed(3);
    Tensor x = randn({256, 256}).requires_grad_();  // 256 KiB
    budget::pin(x);
    Tensor y = exp(x);
    Tensor loss = y.sum();
    std::vector<Tensor> filler;
    while (budget::is_resident(y)) {
      filler.push_back(zeros({256, 256}));
      budget::pin(filler.back());
    }
    filler.clear();
    if (!room) filler.push_back(zeros({(memory_stats().limit - memory_stats().allocated - (128 << 10)) / 4}));
    budget::reset_stats();
    loss.backward();
    return Result{budget::stats(), x.grad().to_vector<float>()};
  };
  const Result ahead = scenario(true, true), lazy = scenario(false, true);
  CHECK(ahead.grad == lazy.grad);
  CHECK(ahead.stats.fetches == 1);
  CHECK(ahead.stats.prefetches == 1);
  CHECK(ahead.stats.offloads == 0);
  CHECK(lazy.stats.fetches == 1);
  CHECK(lazy.stats.prefetches == 0);
  const Result refused = scenario(true, false), without = scenario(false, false);
  CHECK(refused.grad == lazy.grad);
  CHECK(without.grad == lazy.grad);
  CHECK(refused.stats.prefetches == 0);
  CHECK(refused.stats.fetches == without.stats.fetches);
  CHECK(refused.stats.offloads > 0);  // exp's backward made room for y
  CHECK(refused.stats.offloads == without.stats.offloads);
}

// Cost::Modeled prices and ages storages without clocks: the same program under the same budget
// makes the same evictions, rematerializations, offloads and fetches, in the same order, even when
// its kernels run at another speed (here: beside a thread that keeps a core busy).
TEST_CASE("budget: with modeled costs every run evicts, recomputes and offloads the same storages") {
  Outcome free_run = run(gpt(2));
  budget::Options o = at(free_run, 0.45, budget::Offload::Activations);
  o.cost = budget::Cost::Modeled;
  auto decisions = [&](bool busy_core) {
    std::atomic<bool> stop{false};
    std::thread spinner([&] {
      while (busy_core && !stop.load(std::memory_order_relaxed)) {
      }
    });
    record_history(true);
    Outcome b = run(gpt(2), o);
    std::vector<std::string> made;
    for (auto& e : memory_history())
      if (e.kind >= MemoryEventKind::Evict)
        made.push_back(std::string(event_kind_name(e.kind)) + " " + std::to_string(e.bytes) + " " + e.owner);
    record_history(false);
    stop = true;
    spinner.join();
    check_same(b, free_run);
    CHECK(b.peak <= o.limit);
    return made;
  };
  const std::vector<std::string> first = decisions(false);
  CHECK(std::count_if(first.begin(), first.end(), [](const std::string& s) { return s.rfind("evict", 0) == 0; }) > 0);
  CHECK(std::count_if(first.begin(), first.end(), [](const std::string& s) { return s.rfind("offload", 0) == 0; }) > 0);
  CHECK(decisions(true) == first);
  CHECK(decisions(false) == first);
}

// A planned step (begin_step, Options::trace and Options::directives): the trace numbers the storages
// first written in each step, and a directive sends one of them away after the kernel planned, in
// every step, with the same numbers coming out; one whose storage is not the one planned is skipped.
TEST_CASE("budget: a directive offloads or evicts the planned storage after the planned kernel, every step") {
  auto train = [](const budget::Options& o, budget::StepTrace* trace) {
    set_caching(kCPU, false);
    budget::enable(kCPU, o);
    budget::reset_stats();
    manual_seed(7);
    std::vector<double> losses;
    {
      Tensor w1 = randn({64, 64}).mul_(0.1).requires_grad_(), w2 = randn({64, 64}).mul_(0.1).requires_grad_();
      optim::SGD opt({w1, w2}, optim::SGDOptions(0.05));
      for (int s = 0; s < 3; ++s) {
        budget::begin_step(kCPU);
        opt.zero_grad();
        Tensor x = randn({256, 64}), y = randint(0, 64, {256});
        Tensor loss = cross_entropy(matmul(dropout(relu(matmul(x, w1)), 0.2), w2), y);
        losses.push_back(loss.item<double>());
        loss.backward();
        opt.step();
      }
    }
    if (trace) *trace = budget::trace();
    const budget::Stats stats = budget::stats();
    budget::disable(kCPU);
    set_caching(kCPU, true);
    return std::make_pair(losses, stats);
  };
  budget::Options watch;
  watch.remat = budget::Remat::None, watch.trace = true;
  budget::StepTrace trace;
  const auto free_run = train(watch, &trace);
  REQUIRE(!trace.kernels.empty());
  // The largest saved storage, and the longest stretch of kernels without it.
  const budget::StepTrace::Storage* s = nullptr;
  size_t gap = 0;
  for (const auto& x : trace.storages) {
    if (!x.saved || x.gradient || (s && x.bytes <= s->bytes)) continue;
    for (size_t i = 0; i + 1 < x.uses.size(); ++i)
      if (x.uses[i + 1].kernel - x.uses[i].kernel >= 2) s = &x, gap = i;
  }
  REQUIRE(s);
  CHECK(s->birth == int64_t(s - trace.storages.data()));
  CHECK(s->uses.front().kernel < s->uses.back().kernel);
  CHECK(s->uses[gap + 1].recompute_seconds > 0);  // its op can run again
  budget::Directive d;
  d.birth = s->birth, d.leave_after = s->uses[gap].kernel, d.bytes = s->bytes, d.kernel = s->kernel;
  budget::Options planned = watch;
  planned.trace = false;
  for (auto action : {budget::Directive::Action::Offload, budget::Directive::Action::Recompute}) {
    d.action = action;
    planned.directives = {d};
    const auto [losses, stats] = train(planned, nullptr);
    CHECK(losses == free_run.first);
    CHECK(stats.directives_missed == 0);
    const bool offload = action == budget::Directive::Action::Offload;
    CHECK(stats.offloads == (offload ? 3 : 0));
    CHECK(stats.fetches == (offload ? 3 : 0));
    CHECK(stats.evictions == (offload ? 0 : 3));
    CHECK(stats.rematerializations >= (offload ? 0 : 3));
  }
  d.bytes += 512;  // another storage than the one planned
  planned.directives = {d};
  const auto skipped = train(planned, nullptr);
  CHECK(skipped.second.directives_missed == 3);
  CHECK(skipped.second.evictions + skipped.second.offloads == 0);
}

// disable() brings back every evicted storage a handle refers to before it drops recipes: dropping
// an evicted leftover's recipe first (the input of a storage, no handle to it) lost the storages made
// from it, which then could not be brought back.
TEST_CASE("budget: disable brings back storages made from evicted leftovers") {
  set_caching(kCPU, false);
  const int64_t before = memory_stats().allocated;
  budget::enable(kCPU, options(before + (int64_t(4) << 20), budget::Remat::Dynamic, budget::Offload::None));
  std::vector<Tensor> made, expected;
  {
    NoGradGuard ng;
    Tensor x = randn({64, 64});  // 16 KiB
    budget::pin(x);
    for (int i = 0; i < 16; ++i) {
      made.push_back(exp(exp(x * double(i + 1) * 1e-3)));  // the inner exp is a leftover once made
      expected.push_back(made.back().clone());
      budget::pin(expected.back());
    }
    std::vector<Tensor> filler;
    while (std::any_of(made.begin(), made.end(), [](const Tensor& t) { return budget::is_resident(t); })) {
      filler.push_back(zeros({64, 64}));
      budget::pin(filler.back());
    }
  }
  budget::disable(kCPU);
  set_memory_limit(kCPU, 0);
  for (size_t i = 0; i < made.size(); ++i) CHECK(made[i].to_vector<float>() == expected[i].to_vector<float>());
  made.clear(), expected.clear();
  set_caching(kCPU, true);
  CHECK(memory_stats().allocated == before);
}
