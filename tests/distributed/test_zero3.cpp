// ZeRO stage 3 and parameter offload (distributed/parameter_units.h). Under mpirun ([mpi]): N ranks
// with sharded parameters give the losses and parameters of one process with N times the
// accumulation, in float32 and bf16-storage, with checkpoint segments, clipping and offload; every
// rank's ledger holds the shards a hand formula gives, and the planner's simulated rank peaks where
// the real one does. Alone: the same at world size 1, the schedule (what is gathered when), offload's
// host memory, and the errors.
#include <doctest/doctest.h>

#include <set>

#include <memgrad/core/host_memory.h>
#include <memgrad/memgrad.h>

#include "distributed/training.h"

using namespace mg;
using namespace mg_test;
namespace dist = mg::distributed;

namespace {

struct Config {
  dist::ProcessGroup* group = nullptr;  // null: one process
  int zero = 0;
  bool offload = false;
  int64_t accum = 1;  // per process
  double clip = 0;
  train::Precision precision = train::Precision::Float32;
  train::Policy policy = train::Policy::none();
  bool prefetch = true;
  const char* optimizer = "adamw";  // (optim/registry.h) with lr 1e-2
};

train::StepOptions step_options(const Config& c, const train::ChainModel& chain) {
  train::StepOptions o;
  o.accum = c.accum, o.clip_norm = c.clip, o.precision = c.precision;
  o.grad_scaler = c.precision == train::Precision::Float16Storage || c.precision == train::Precision::Float16;
  o.zero_stage = c.zero, o.offload_params = c.offload, o.unit_prefetch = c.prefetch;
  o.units = chain.unit_names();
  if (c.group) o.world_size = c.group->size(), o.rank = c.group->rank();
  return o;
}

std::unique_ptr<optim::Optimizer> adamw(const nn::NamedTensors& params) {
  return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(1e-2));
}

// The optimizer of `c` with lr 1e-2.
train::Trainer::OptimizerFactory optimizer_of(const Config& c) {
  return [name = std::string(c.optimizer)](const nn::NamedTensors& params) {
    optim::OptimizerSpec spec(name);
    spec.lr = 1e-2;
    return optim::make_optimizer(spec, params);
  };
}

// `steps` steps of the tiny GPT as memgrad train runs them (train::Trainer), from `resume` if given.
Run run_training(const Config& c, int steps, const optim::StateDict* resume = nullptr, int first_step = 0) {
  manual_seed(1234);
  // Data parallel as memgrad train builds it: deferred, each rank materializing what it holds.
  train::ChainModel chain(tiny_gpt(), kCPU, c.zero > 0 || c.offload || c.group);
  train::Trainer trainer(chain.module(), step_options(c, chain), optimizer_of(c), c.group);
  dist::DataParallel* dp = trainer.data_parallel();
  if (resume) load_run_state(*resume, chain.module(), *trainer.optimizer(), dp);
  Run r;
  for (int step = first_step; step < first_step + steps; ++step)
    r.losses.push_back(train::train_step(
        chain, trainer, [step](int64_t g) { return batch(step, g); }, c.policy));
  const nn::StateDict model = dp ? dp->model_state_dict(chain.module()) : chain.module().state_dict();
  for (auto& [k, t] : model) {
    r.params.push_back(t.to(kFloat32).to_vector<float>());
    r.state["model." + k] = t.clone();
  }
  for (auto& [k, t] : dp ? dp->state_dict(*trainer.optimizer()) : trainer.optimizer()->state_dict())
    r.state["optim." + k] = t.clone();
  r.state["rng"] = scalar_tensor(int64_t(default_generator().offset()), kInt64);
  return r;
}

int64_t rounded(int64_t bytes) { return int64_t(memory::round_size(size_t(bytes))); }

// One rank's ledger after a step of AdamW in float32, by hand: per unit (each block, the root) a shard
// and a gradient shard of ceil(elements / N) floats, and per parameter two moments of its piece.
struct Formula {
  int64_t parameter = 0, gradient = 0, state = 0;
};
Formula formula(const train::ChainModel& chain, int n, int r) {
  const nn::NamedTensors named = chain.module().named_parameters();
  std::vector<std::string> units = chain.unit_names();
  units.push_back("");  // the root: the rest
  Formula f;
  for (const std::string& unit : units) {
    int64_t elements = 0;
    std::vector<int64_t> sizes;
    for (auto& [name, t] : named) {
      const bool mine = unit.empty() ? std::none_of(units.begin(), units.end() - 1,
                                                    [&](const std::string& u) { return name.rfind(u + ".", 0) == 0; })
                                     : name.rfind(unit + ".", 0) == 0;
      if (mine) sizes.push_back(t.numel()), elements += t.numel();
    }
    const int64_t c = (elements + n - 1) / n;
    f.parameter += rounded(c * 4), f.gradient += rounded(c * 4);
    int64_t offset = 0;
    for (int64_t numel : sizes) {  // the parameter's piece in [r c, (r + 1) c)
      const int64_t piece = std::max<int64_t>(0, std::min(offset + numel, (r + 1) * c) - std::max(offset, r * c));
      if (piece > 0) f.state += 2 * rounded(piece * 4);
      offset += numel;
    }
  }
  return f;
}

// Two steps of `trainer` on `data(step, micro-batch)`, each step's allocated peak counted from `base`,
// and what the ledger holds after them.
struct Measured {
  int64_t peaks[2] = {0, 0};
  MemoryStats after;
};
Measured two_steps(const train::ChainModel& chain, train::Trainer& trainer, const MemoryStats& base,
                   const std::function<std::pair<Tensor, Tensor>(int64_t, int64_t)>& data) {
  Measured m;
  for (int step = 0; step < 2; ++step) {
    reset_peak(kCPU);
    train::train_step(
        chain, trainer, [&](int64_t g) { return data(step, g); }, train::Policy::none());
    m.peaks[step] = memory_stats(kCPU).peak_allocated - base.allocated;
  }
  m.after = memory_stats(kCPU);
  return m;
}
// The ledger holds what the formula says (beyond `base`), and no communication buffer.
void check_held(const MemoryStats& after, const MemoryStats& base, const Formula& f) {
  auto held = [&](Category cat) { return after.category(cat) - base.category(cat); };
  CHECK(held(Category::Parameter) == f.parameter);
  CHECK(held(Category::Gradient) == f.gradient);
  CHECK(held(Category::OptimizerState) == f.state);
  CHECK(held(Category::Workspace) == 0);
}

}  // namespace

TEST_CASE("ZeRO-3 and parameter offload at world size 1 train as plain training does") {
  for (train::Policy policy : {train::Policy::none(), train::Policy::every_block(2)}) {
    INFO(policy.name);
    Config plain;
    plain.accum = 2, plain.clip = 1.0, plain.policy = policy;
    const Run reference = run_training(plain, 2);
    for (bool offload : {false, true}) {
      INFO((offload ? "offload" : "ZeRO-3"));
      Config c = plain;
      c.zero = offload ? 0 : 3, c.offload = offload;
      // The same arithmetic: each unit's gradient is its parameters' summed into zeros, the norm
      // summed over the same tensors in the same order.
      check_same(run_training(c, 2), reference, true, "clipping, accumulation");
    }
  }
  // Autocast (float32 units, half copies made by autocast per forward) and half storage with float32
  // masters and loss scaling (the scaler unscales each piece's gradient; found inf on any piece skips).
  for (train::Precision precision : {train::Precision::BFloat16, train::Precision::Float16Storage}) {
    INFO(train::precision_name(precision));
    Config plain;
    plain.accum = 2, plain.clip = 1.0, plain.precision = precision, plain.policy = train::Policy::sqrt_n(2);
    Config sharded = plain;
    sharded.zero = 3;
    check_same(run_training(sharded, 2), run_training(plain, 2), true, "sharded");
  }
}

TEST_CASE("ZeRO-3: a unit is gathered for its forward, the next one prefetched, and released after") {
  auto one = dist::simulated_group();
  for (bool prefetch : {true, false}) {
    INFO("prefetch " << prefetch);
    manual_seed(2);
    train::ChainModel chain(tiny_gpt(0.0), kCPU);
    dist::DataParallel dp(chain.module().named_parameters(), *one,
                          dist::DataParallelOptions().zero_stage(3).units(chain.unit_names()).prefetch(prefetch));
    REQUIRE(dp.units()->size() == 3);  // h.0, h.1, root
    auto gathered = [] {
      std::set<std::string> units;
      for (auto& [owner, bytes] : memory_by_owner(kCPU))
        if (owner.find(" (gathered)") != std::string::npos) units.insert(owner);
      return units;
    };
    CHECK(gathered().empty());  // between steps only the shards are held
    dp.prepare_forward();
    CHECK(gathered() == (prefetch ? std::set<std::string>{"root (gathered)", "h.0 (gathered)"}
                                  : std::set<std::string>{"root (gathered)"}));
    std::set<std::string> in_first, in_second;
    auto [x, y] = batch(0, 0);
    Tensor h = chain.head(x);
    h = dp.run_unit(0, [&] {
      in_first = gathered();
      return chain.chain().block(0, h, false);
    });
    h = dp.run_unit(1, [&] {
      in_second = gathered();
      return chain.chain().block(1, h, false);
    });
    CHECK(in_first == (prefetch ? std::set<std::string>{"root (gathered)", "h.0 (gathered)", "h.1 (gathered)"}
                                : std::set<std::string>{"root (gathered)", "h.0 (gathered)"}));
    CHECK(in_second == std::set<std::string>{"root (gathered)", "h.1 (gathered)"});  // h.0 resharded
    // The last unit stays for its backward, which comes next.
    CHECK(gathered() == std::set<std::string>{"root (gathered)", "h.1 (gathered)"});
    Tensor loss = chain.tail(h, y);
    std::set<std::string> at_h0;
    chain.module().named_parameters()[2].second.register_hook([&](const Tensor&) {  // h.0's first parameter
      at_h0 = gathered();
      return Tensor();
    });
    dp.prepare_backward();
    loss.backward();
    CHECK(at_h0 == std::set<std::string>{"root (gathered)", "h.0 (gathered)"});  // h.1 done and released
    dp.finish_backward();
    CHECK(gathered().empty());
    // A parameter between uses has no bytes on the device: reading it is an error that says why.
    CHECK_THROWS_AS(chain.module().named_parameters()[2].second.to_vector<float>(), ValueError);
    dp.zero_grad();
  }
}

TEST_CASE("ZeRO-3: the ledger holds each unit's shard and gradient shard, and the plan predicts the peaks") {
  auto one = dist::simulated_group();
  const MemoryStats base = memory_stats(kCPU);
  int64_t peaks[2];
  {
    manual_seed(2);
    train::ChainModel chain(tiny_gpt(), kCPU);
    const Formula f = formula(chain, 1, 0);
    Config c;
    c.zero = 3;
    train::Trainer trainer(chain.module(), step_options(c, chain), adamw, one.get());
    const Measured m = two_steps(chain, trainer, base, batch);
    peaks[0] = m.peaks[0], peaks[1] = m.peaks[1];
    const MemoryStats& s = m.after;
    check_held(s, base, f);
    // At the peak, the gathered units are their own owners.
    bool gathered = false;
    for (auto& [owner, bytes] : s.at_peak_by_owner)
      gathered = gathered || owner.find("(gathered)") != std::string::npos;
    CHECK(gathered);
  }
  for (int64_t steps : {1, 2}) {
    train::StepOptions o;
    o.zero_stage = 3;
    plan::PlanOptions po;
    po.steps = steps, po.smallest_limit = false;
    CHECK(plan::plan(tiny_gpt(), kShape, o, train::Policy::none(), po).peak == peaks[steps - 1]);
  }
}

TEST_CASE(
    "parameter offload: the device holds one unit at a time; the shards, gradients and state live in host memory") {
  const train::ModelSpec spec = tiny_gpt();
  train::StepOptions o;
  o.offload_params = true;
  // Planned on meta: device and host.
  reset_host_peak(kMeta);
  const plan::StepReport planned = plan::plan(spec, kShape, o);
  const int64_t planned_host = host_memory_stats(kMeta).peak;
  CHECK(host_memory_stats(kMeta).allocated == 0);  // the plan's program is gone
  // Measured: the same peaks to the byte, under a limit below the model's parameters, gradients and
  // AdamW state.
  const int64_t params = train::ChainModel(spec, kMeta).module().num_parameters();
  CHECK(planned.smallest_limit < 16 * params);
  const plan::StepReport measured = plan::measure(plan::program(spec, kShape, o), plan::context(kShape));
  CHECK(measured.peak == planned.peak);
  CHECK(measured.first_peak == planned.first_peak);
  CHECK(measured.reserved == planned.reserved);
  CHECK(measured.category(Category::OptimizerState) == 0);
  CHECK(host_memory_stats(kCPU).allocated == 0);
  reset_host_peak(kCPU);
  {
    train::ChainModel chain(spec, kCPU);
    o.units = chain.unit_names();
    train::Trainer trainer(chain.module(), o);
    for (int step = 0; step < 2; ++step)
      train::train_step(
          chain, trainer, [step](int64_t g) { return batch(step, g); }, train::Policy::none());
    const HostMemoryStats h = host_memory_stats(kCPU);
    const Formula f = formula(chain, 1, 0);
    CHECK(h.category(Category::Parameter) == f.parameter);
    CHECK(h.category(Category::Gradient) == f.gradient);
    CHECK(h.category(Category::OptimizerState) == f.state);
    CHECK(h.peak == planned_host);
  }
  CHECK(host_memory_stats(kCPU).allocated == 0);
}

TEST_CASE("ZeRO-3: bad use raises typed errors") {
  auto one = dist::simulated_group();
  Tensor a = zeros({3}).requires_grad_(), b = zeros({2}).requires_grad_();
  CHECK_THROWS_AS(dist::ParameterUnits({{"a", a}}, *one, {{"h.0"}, false, true}), ValueError);  // names nothing
  Tensor c = zeros({2}, TensorOptions(kFloat64)).requires_grad_();
  CHECK_THROWS_AS(dist::ParameterUnits({{"a", a}, {"c", c}}, *one, {}), ValueError);  // two dtypes
  budget::Options under;
  under.limit = 64 << 20;
  budget::enable(kCPU, under);  // its eviction would fight the units' own release of their bytes
  CHECK_THROWS_AS(dist::ParameterUnits({{"a", a}}, *one, {}), ValueError);
  budget::disable(kCPU);
  set_memory_limit(kCPU, 0);
  {
    dist::ParameterUnits units({{"a", a}, {"b", b}}, *one, {});
    CHECK_THROWS_AS(units.run(0, [] { return Tensor(); }), IndexError);  // only the root unit
    Storage& s = *a.storage();
    CHECK(!s.has_bytes());
    CHECK_THROWS_AS(s.release_bytes(), ValueError);
  }
}

TEST_CASE("ZeRO-3 [mpi]: N ranks give the losses and parameters of one process with N times the accumulation") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  for (bool offload : {false, true}) {
    INFO((offload ? "offload" : "ZeRO-3"));
    Config c;
    c.group = &g, c.zero = 3, c.offload = offload, c.clip = 1.0;
    Config one;
    one.accum = n, one.clip = 1.0;
    // Clipping sums the squares piece by piece, then across ranks: equal to rounding.
    check_same(run_training(c, 3), run_training(one, 3), false, "one micro-batch per rank, clipping");
    c.accum = 2, one.accum = 2 * n;
    check_same(run_training(c, 2), run_training(one, 2), false, "two micro-batches per rank");
    c.accum = 1, one.accum = n;
    c.policy = one.policy = train::Policy::sqrt_n(2);  // a recompute gathers its units again
    check_same(run_training(c, 2), run_training(one, 2), false, "checkpoint segments");
  }
}

TEST_CASE("ZeRO-3 [mpi]: Lion on 1-D pieces gives one process's losses; its gathered state resumes there") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  for (bool offload : {false, true}) {
    INFO((offload ? "offload" : "ZeRO-3"));
    Config c;
    c.group = &g, c.zero = 3, c.offload = offload, c.optimizer = "lion";
    Config one;
    one.accum = n, one.optimizer = "lion";
    const Run whole = run_training(one, 4), first = run_training(c, 2);
    Run rest = whole;
    rest.losses.erase(rest.losses.begin(), rest.losses.begin() + 2);
    // Two ranks sum each gradient as one process sums its two micro-batches: bitwise.
    check_same(first, run_training(one, 2), n == 2, "sharded");
    check_same(run_training(one, 2, &first.state, 2), rest, n == 2, "resumed in one process");
  }
}

TEST_CASE("ZeRO-3 [mpi]: bf16-storage with checkpoint segments gives one process's losses") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  Config c;
  c.group = &g, c.zero = 3, c.precision = train::Precision::BFloat16Storage, c.policy = train::Policy::sqrt_n(2);
  Config one = c;
  one.group = nullptr, one.zero = 0, one.accum = n;
  const Run sharded = run_training(c, 3), alone = run_training(one, 3);
  // The gradients are summed in bfloat16 either way (the reduce-scatter through float, rounded once
  // per pair; accumulation in place): for two ranks in the same order, so bitwise. For more the sums
  // meet in another order and round differently: the losses agree to the printed 4 decimals, and a
  // parameter may differ by what AdamW moves it in the steps taken (about lr = 0.01 per step whatever
  // the gradient's size, so a gradient that rounded the other way moves it up to 2 lr further).
  if (n == 2) {
    check_same(sharded, alone, true, "bitwise");
  } else {
    CHECK(difference(sharded, alone, true) < 1e-4);
    CHECK(difference(sharded, alone) < 3 * 2 * 1e-2);
  }
}

TEST_CASE("ZeRO-3 [mpi]: each rank's ledger holds its shards, and the planner predicts its peaks") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size(), r = g.rank();
  for (const train::ModelSpec& spec : {tiny_gpt(), train::ModelSpec::mlp(2, 129)}) {
    const bool gpt = spec.kind == train::ModelSpec::Kind::GPT;
    INFO((gpt ? "GPT" : "MLP"));
    const MemoryStats base = memory_stats(kCPU);
    int64_t peaks[2] = {0, 0};
    {
      manual_seed(5);
      train::ChainModel chain(spec, kCPU, true);  // deferred: each rank materializes its shards
      const Formula f = formula(chain, n, r);
      Config c;
      c.group = &g, c.zero = 3;
      train::Trainer trainer(chain.module(), step_options(c, chain), adamw, &g);
      const Measured m = two_steps(chain, trainer, base, [gpt](int64_t step, int64_t micro) {
        return gpt ? batch(step, micro) : std::pair{randn({2, 129}), randn({2, 129})};
      });
      peaks[0] = m.peaks[0], peaks[1] = m.peaks[1];
      check_held(m.after, base, f);
    }
    for (int64_t steps : {1, 2}) {  // the simulated rank on meta, planned without any process
      train::StepOptions o;
      o.world_size = n, o.rank = r, o.zero_stage = 3;
      plan::PlanOptions po;
      po.steps = steps, po.smallest_limit = false;
      CHECK(plan::plan(spec, kShape, o, train::Policy::none(), po).peak == peaks[steps - 1]);
    }
  }
}

TEST_CASE("ZeRO-3 [mpi]: the gathered state resumes at another world size and stage with the same losses") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  Config one;
  one.accum = n;
  const Run whole = run_training(one, 4);  // one process, uninterrupted
  Config sharded;
  sharded.group = &g, sharded.zero = 3;
  const Run first = run_training(sharded, 2);
  // The gathered model and optimizer state have the keys and shapes of one process's.
  const Run half = run_training(one, 2);
  for (auto& [k, t] : half.state) {
    INFO(k);
    REQUIRE(first.state.count(k));
    CHECK(first.state.at(k).shape() == t.shape());
  }
  CHECK(first.state.size() == half.state.size());
  Run rest = whole;
  rest.losses.erase(rest.losses.begin(), rest.losses.begin() + 2);
  check_same(run_training(one, 2, &first.state, 2), rest, false, "resumed in one process");
  Config zero1 = sharded;
  zero1.zero = 1;
  check_same(run_training(zero1, 2, &first.state, 2), rest, false, "resumed on N ranks with ZeRO-1");
  check_same(run_training(sharded, 2, &half.state, 2), rest, false, "ZeRO-3 resumed from one process's state");
}
