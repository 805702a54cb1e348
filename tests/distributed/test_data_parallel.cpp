// Data parallelism and ZeRO. Under mpirun -np 2 ([mpi]): N ranks give the losses and parameters of
// one process running all N micro-batches (bitwise where the sums meet in the same order), ZeRO-1 and
// ZeRO-2 give stage 0's, each rank's ledger holds the bytes a hand formula gives, and the planner's
// simulated rank peaks where the real one does. Alone: the same machinery at world size 1, and the
// checks that need no second process.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include <memgrad/memgrad.h>

#include "distributed/training.h"

using namespace mg;
namespace dist = mg::distributed;
using dist::BucketLayout;
using namespace mg_test;

namespace {

struct Setup {
  dist::ProcessGroup* group = nullptr;  // null: one process, no data parallelism
  int zero = 0;
  int64_t accum = 1;  // per process
  double clip = 0;
  int64_t bucket = 2048;  // bytes: several buckets even for the tiny GPT
  train::Policy policy = train::Policy::none();
  const char* optimizer = "adamw";  // (optim/registry.h) with lr 1e-2
};

Run run_training(const Setup& s, int steps, const optim::StateDict* resume = nullptr, int first_step = 0) {
  manual_seed(1234);
  train::ChainModel chain(tiny_gpt(), kCPU);
  std::unique_ptr<dist::DataParallel> dp;
  nn::NamedTensors params = chain.module().named_parameters();
  if (s.group) {
    dp = std::make_unique<dist::DataParallel>(params, *s.group,
                                              dist::DataParallelOptions().zero_stage(s.zero).bucket_bytes(s.bucket));
    params = dp->optimizer_parameters();
  }
  optim::OptimizerSpec spec(s.optimizer);
  spec.lr = 1e-2;
  std::unique_ptr<optim::Optimizer> made = optim::make_optimizer(spec, params);
  optim::Optimizer& opt = *made;
  if (resume) {
    nn::StateDict model;
    for (auto& [k, t] : *resume)
      if (k.rfind("model.", 0) == 0) model[k.substr(6)] = t;
    chain.module().load_state_dict(model);
    optim::StateDict o;
    for (auto& [k, t] : *resume)
      if (k.rfind("optim.", 0) == 0) o[k.substr(6)] = t;
    dp ? dp->load_state_dict(opt, o) : opt.load_state_dict(o);
    default_generator().set_offset(uint64_t(resume->at("rng").item<int64_t>()));
  }
  train::StepOptions o;
  o.accum = s.accum, o.clip_norm = s.clip;
  Run r;
  for (int step = first_step; step < first_step + steps; ++step)
    r.losses.push_back(train::train_step(
        chain, &opt, nullptr, [step](int64_t g) { return batch(step, g); }, s.policy, o, dp.get()));
  for (auto& [name, t] : chain.module().named_parameters()) r.params.push_back(t.to_vector<float>());
  for (auto& [k, t] : chain.module().state_dict()) r.state["model." + k] = t.clone();
  for (auto& [k, t] : dp ? dp->state_dict(opt) : opt.state_dict()) r.state["optim." + k] = t.clone();
  r.state["rng"] = scalar_tensor(int64_t(default_generator().offset()), kInt64);
  return r;
}

int64_t rounded(int64_t bytes) { return int64_t(memory::round_size(size_t(bytes))); }

// The bytes one rank's ledger holds after a step, by hand from the parameter sizes: buckets filled
// in reverse parameter order up to `bucket` bytes; slices of c = ceil(n / N) elements.
struct Formula {
  int64_t parameter = 0, gradient = 0, state = 0;
};
Formula formula(const nn::NamedTensors& params, int n, int r, int zero, int64_t bucket, int64_t param_bytes,
                bool masters) {
  Formula f;
  std::vector<int64_t> elements, chunks;  // per bucket
  int64_t in_bucket = -1;
  for (size_t i = params.size(); i-- > 0;) {
    const int64_t numel = params[i].second.numel(), c = std::max<int64_t>(1, (numel + n - 1) / n);
    if (in_bucket < 0 || (elements.back() + numel) * param_bytes > bucket) {
      elements.push_back(0), chunks.push_back(0);
    }
    in_bucket = 1;
    elements.back() += numel, chunks.back() += c;
    f.parameter += rounded(numel * param_bytes);
    const int64_t slice = zero == 0 ? numel : std::max<int64_t>(0, std::min(c, numel - r * c));
    if (slice > 0) f.state += (masters ? 3 : 2) * rounded(slice * (masters ? 4 : param_bytes));  // master + moments
  }
  for (size_t k = 0; k < elements.size(); ++k)
    f.gradient += rounded((zero == 2 ? chunks[k] : elements[k]) * param_bytes);
  return f;
}

}  // namespace

TEST_CASE("data parallel [mpi]: N ranks give the losses and parameters of one process with N times the accumulation") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  const bool two = n == 2;  // a sum of two gradients is the same in either order: bitwise
  // One micro-batch per rank, dropout and clipping on.
  check_same(run_training({&g, 0, 1, 1.0}, 3), run_training({nullptr, 0, n, 1.0}, 3), two, "one micro-batch per rank");
  Setup s{&g, 0, 1, 1.0};
  s.policy = train::Policy::every_block(2);  // segments replay each rank's dropout masks
  const Run many = run_training(s, 2);
  s.group = nullptr, s.accum = n;
  check_same(many, run_training(s, 2), two, "checkpoint segments");
  // Two micro-batches per rank: partial sums meet in another order.
  check_same(run_training({&g, 0, 2, 1.0}, 3), run_training({nullptr, 0, 2 * n, 1.0}, 3), false,
             "two micro-batches per rank");
}

TEST_CASE("data parallel [mpi]: ZeRO-1 and ZeRO-2 give stage 0's losses and parameters") {
  dist::ProcessGroup& g = dist::world();
  const bool two = g.size() == 2;
  for (int zero : {1, 2}) {
    INFO("ZeRO-" << zero);
    // Without clipping every element sees the same arithmetic (stage 2's reduce-scatter sums in the
    // all-reduce's order for two ranks): bitwise.
    check_same(run_training({&g, zero, 1, 0.0}, 3), run_training({&g, 0, 1, 0.0}, 3), two || zero == 1, "no clipping");
    // Clipping sums the squares slice by slice, then across ranks: equal to rounding.
    check_same(run_training({&g, zero, 1, 1.0}, 3), run_training({&g, 0, 1, 1.0}, 3), false, "clipping");
    // Accumulation: stage 2 reduce-scatters every micro-batch, stage 1 the last.
    check_same(run_training({&g, zero, 2, 1.0}, 2), run_training({&g, 0, 2, 1.0}, 2), false,
               "two micro-batches per rank");
  }
}

TEST_CASE("data parallel [mpi]: ZeRO-1 and ZeRO-2 shard Lion's moment and give stage 0's losses and parameters") {
  dist::ProcessGroup& g = dist::world();
  const bool two = g.size() == 2;
  for (int zero : {1, 2}) {
    INFO("ZeRO-" << zero);
    Setup sharded{&g, zero, 1, 0.0}, whole{&g, 0, 1, 0.0};
    sharded.optimizer = whole.optimizer = "lion";
    const Run a = run_training(sharded, 3), b = run_training(whole, 3);
    check_same(a, b, two || zero == 1, "no clipping");
    for (auto& [k, t] : b.state) {  // the gathered moment: one process's keys and shapes
      INFO(k);
      REQUIRE(a.state.count(k));
      CHECK(a.state.at(k).shape() == t.shape());
    }
  }
}

TEST_CASE("data parallel [mpi]: the gathered state resumes at another world size with the same losses") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  const bool two = n == 2;
  const Run whole = run_training({nullptr, 0, n, 0.0}, 4);  // one process, uninterrupted
  const Run first = run_training({&g, 2, 1, 0.0}, 2);       // ZeRO-2 on N ranks, steps 0-1
  // The gathered optimizer state has the keys and shapes of one process's optimizer.
  const Run half = run_training({nullptr, 0, n, 0.0}, 2);
  for (auto& [k, t] : half.state) {
    INFO(k);
    REQUIRE(first.state.count(k));
    CHECK(first.state.at(k).shape() == t.shape());
    if (two) CHECK(first.state.at(k).to_vector<double>() == t.to_vector<double>());
  }
  CHECK(first.state.size() == half.state.size());
  // Steps 2-3 on one process, and on N ranks with ZeRO-1, from that state.
  const Run alone = run_training({nullptr, 0, n, 0.0}, 2, &first.state, 2);
  const Run ranks = run_training({&g, 1, 1, 0.0}, 2, &first.state, 2);
  Run rest = whole;
  rest.losses.erase(rest.losses.begin(), rest.losses.begin() + 2);
  check_same(alone, rest, two, "resumed in one process");
  check_same(ranks, alone, two, "resumed on N ranks with ZeRO-1");
}

// Micro-batch g of step s for a model of `spec` (token ids for a GPT, rows for an MLP).
std::pair<Tensor, Tensor> batch_for(const train::ModelSpec& spec, int64_t s, int64_t g) {
  if (spec.kind == train::ModelSpec::Kind::GPT) return batch(s, g);
  std::mt19937_64 rng(uint64_t(s) * 1000 + uint64_t(g));
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(kShape.batch * spec.mlp_width)), y(x.size());
  for (auto& v : x) v = normal(rng);
  for (auto& v : y) v = normal(rng);
  return {tensor(x, {kShape.batch, spec.mlp_width}), tensor(y, {kShape.batch, spec.mlp_width})};
}

TEST_CASE(
    "data parallel [mpi]: each rank's ledger holds the bytes the formula gives, and the planner predicts its peaks") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size(), r = g.rank();
  const int64_t bucket = 2048;
  // The GPT's sizes split evenly; the MLP's 129 x 129 weights do not, so the last rank holds less.
  for (const train::ModelSpec& spec : {tiny_gpt(), train::ModelSpec::mlp(2, 129)}) {
    const bool gpt = spec.kind == train::ModelSpec::Kind::GPT;
    INFO(std::string(gpt ? "GPT" : "MLP"));
    std::vector<int64_t> state_by_stage;
    for (int zero : {0, 1, 2}) {
      INFO("ZeRO-" << zero);
      const MemoryStats base = memory_stats(kCPU);
      int64_t peaks[2] = {0, 0}, state_bytes = 0;
      {
        manual_seed(5);
        train::ChainModel chain(spec, kCPU);
        const nn::NamedTensors named = chain.module().named_parameters();
        dist::DataParallel dp(named, g, dist::DataParallelOptions().zero_stage(zero).bucket_bytes(bucket));
        optim::AdamW opt(dp.optimizer_parameters());
        train::StepOptions o;
        for (int step = 0; step < 2; ++step) {
          chain.module().zero_grad();
          dp.zero_grad();
          reset_peak(kCPU);
          train::train_step(
              chain, &opt, nullptr, [&spec, step](int64_t m) { return batch_for(spec, step, m); },
              train::Policy::none(), o, &dp);
          peaks[step] = memory_stats(kCPU).peak_allocated - base.allocated;
        }
        const MemoryStats s = memory_stats(kCPU);
        const Formula f = formula(named, n, r, zero, bucket, 4, false);
        auto held = [&](Category c) { return s.category(c) - base.category(c); };
        CHECK(held(Category::Parameter) == f.parameter);
        CHECK(held(Category::Gradient) == f.gradient);
        CHECK(held(Category::OptimizerState) == f.state);
        CHECK(held(Category::Workspace) == 0);  // communication buffers are gone between steps
        state_bytes = held(Category::OptimizerState);
        // The shard table names each rank's slices and the state bytes its ledger holds for them.
        const std::string table = dp.shard_table(opt);
        const auto [begin, end] = dp.slice(0, r);
        CHECK(table.find("[" + std::to_string(begin) + ", " + std::to_string(end) + "): ") != std::string::npos);
      }
      state_by_stage.push_back(state_bytes);
      const std::vector<int64_t> every = g.all_gather(std::vector<int64_t>{state_bytes});
      if (zero > 0 && !gpt && n == 2) CHECK(every.front() != every.back());  // uneven slices: bytes differ
      for (int64_t steps : {1, 2}) {  // the simulated rank on meta, planned without any process
        train::StepOptions o;
        o.world_size = n, o.rank = r, o.zero_stage = zero, o.bucket_bytes = bucket;
        plan::PlanOptions po;
        po.steps = steps, po.smallest_limit = false;
        CHECK(plan::plan(spec, kShape, o, train::Policy::none(), po).peak == peaks[steps - 1]);
      }
    }
    CHECK(state_by_stage[1] < state_by_stage[0]);  // sharded: about 1/N of the state
    CHECK(state_by_stage[2] == state_by_stage[1]);
  }
}

TEST_CASE("data parallel [mpi]: half parameters step through float32 master slices; inf on one rank skips on all") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size(), r = g.rank();
  for (int zero : {1, 2}) {
    INFO("ZeRO-" << zero);
    const MemoryStats base = memory_stats(kCPU);
    {
      manual_seed(3);
      nn::Linear fc(64, 48);
      fc.to(kFloat16);
      const nn::NamedTensors named = fc.named_parameters();
      dist::DataParallel dp(named, g, dist::DataParallelOptions().zero_stage(zero));
      REQUIRE(dp.masters());
      optim::Adam opt(dp.optimizer_parameters());
      Tensor x = randn({8, 64}).to(kFloat16) * double(r + 1);
      dp.prepare_backward();
      fc(x).to(kFloat32).pow(2.0).mean().backward();
      dp.finish_backward();
      dp.masters()->grads_to_masters();
      opt.step();
      dp.masters()->masters_to_params();
      dp.gather_parameters();
      // ZeRO's mixed-precision accounting: 2 (param) + 2 (grad, sharded at stage 2) + 12 (master and
      // two moments, sharded) bytes per parameter, each tensor rounded by the ledger.
      const Formula f = formula(named, n, r, zero, int64_t(25) << 20, 2, true);
      const MemoryStats s = memory_stats(kCPU);
      CHECK(s.category(Category::Parameter) - base.category(Category::Parameter) == f.parameter);
      CHECK(s.category(Category::Gradient) - base.category(Category::Gradient) == f.gradient);
      CHECK(s.category(Category::OptimizerState) - base.category(Category::OptimizerState) == f.state);
      // Every rank ends with the same half parameters.
      const std::vector<float> w = fc.weight.to_vector<float>();
      Tensor sum = fc.weight.detach().to(kFloat32), mine = sum.clone();
      g.all_reduce(sum).wait();
      CHECK(sum.to_vector<float>() == (mine * double(n)).to_vector<float>());
    }
  }
  // One rank's slice overflows: every rank skips the step and backs off the scale.
  Tensor w = zeros({1, 8}).requires_grad_();
  dist::DataParallel dp({{"w", w}}, g, dist::DataParallelOptions().zero_stage(2));
  optim::SGD opt(dp.optimizer_parameters(), optim::SGDOptions(0.1));
  amp::GradScaler scaler;
  std::vector<float> x(8, 1.0f);
  if (r == n - 1) x[1] = INFINITY;  // element 1 lies in rank 0's slice only
  dp.prepare_backward();
  scaler.scale((w * tensor(x, {1, 8})).sum()).backward();
  dp.finish_backward();
  scaler.unscale_(opt);
  const bool local = scaler.found_inf();
  CHECK(local == (r == 0));
  scaler.merge_found_inf(dp.any_rank(local));
  CHECK(!scaler.step(opt));
  scaler.update();
  dp.gather_parameters();
  CHECK(scaler.get_scale() == 32768.0);
  CHECK(w.to_vector<float>() == std::vector<float>(8, 0.0f));
}

TEST_CASE("data parallel: at world size 1 every stage trains as plain training does") {
  auto one = dist::simulated_group();
  const Run plain = run_training({nullptr, 0, 2, 1.0}, 2);
  for (int zero : {0, 1, 2}) {
    INFO("ZeRO-" << zero);
    CHECK(difference(run_training({one.get(), zero, 2, 1.0}, 2), plain) < 1e-6);
    CHECK(difference(run_training({one.get(), zero, 2, 0.0}, 2), run_training({nullptr, 0, 2, 0.0}, 2)) == 0.0);
  }
}

TEST_CASE("data parallel: a bucket is reduced while backward still runs, as soon as its gradients are ready") {
  auto one = dist::simulated_group();
  manual_seed(2);
  train::ChainModel chain(tiny_gpt(0.0), kCPU);
  const nn::NamedTensors named = chain.module().named_parameters();
  dist::DataParallel dp(named, *one, dist::DataParallelOptions().bucket_bytes(2048));
  const size_t n = dp.buckets().size();
  REQUIRE(n > 2);
  CHECK(dp.buckets()[0].params[0] == named.size() - 1);  // the last parameters, which backward reaches first
  CHECK(dp.buckets()[n - 1].params.back() == 0);         // the embedding, reached last
  // When backward reaches the embedding, bucket 0 is already out and the last one is not.
  std::map<std::string, int64_t> owners;
  Tensor wte = named[0].second;
  wte.register_hook([&owners](const Tensor&) {
    owners = memory_by_owner(kCPU);
    return Tensor();
  });
  auto [x, y] = batch(0, 0);
  dp.prepare_backward();
  chain.loss(x, y, train::Policy::none()).backward();
  dp.finish_backward();
  CHECK(owners.count("ddp.bucket.0") == 1);
  CHECK(owners.count("ddp.bucket." + std::to_string(n - 1)) == 0);
  // Afterwards every gradient lives in its bucket: .grad is a view of the bucket's memory.
  const MemoryStats s = memory_stats(kCPU);
  for (size_t k = 0; k < n; ++k) {
    const BucketLayout& l = dp.buckets()[k];
    for (size_t j : l.params)
      CHECK(named[j].second.grad().storage()->block()->owner() == "ddp.bucket." + std::to_string(k));
    CHECK(memory_by_owner(kCPU).at("ddp.bucket." + std::to_string(k)) ==
          int64_t(memory::round_size(size_t(l.elements) * 4)));
  }
  CHECK(s.category(Category::Gradient) > 0);
  // The optimizer's per-parameter table counts each gradient's own bytes, not its bucket's (a
  // gradient alone in its bucket is the whole block, rounded as the ledger rounds).
  optim::SGD opt(dp.optimizer_parameters());
  int64_t grads = 0;
  for (const BucketLayout& l : dp.buckets())
    for (size_t j : l.params)
      grads += l.params.size() == 1 ? int64_t(memory::round_size(named[j].second.nbytes()))
                                    : int64_t(named[j].second.nbytes());
  CHECK(opt.state_report().grad_bytes == grads);
}

TEST_CASE("data parallel: parameters without a gradient keep none, as in one process") {
  auto one = dist::simulated_group();
  for (int zero : {0, 1, 2}) {
    INFO("ZeRO-" << zero);
    Tensor used = ones({4}).requires_grad_(), unused = ones({3}).requires_grad_();
    dist::DataParallel dp({{"used", used}, {"unused", unused}}, *one, dist::DataParallelOptions().zero_stage(zero));
    optim::SGD opt(dp.optimizer_parameters(), optim::SGDOptions(0.5).weight_decay(0.1));
    dp.prepare_backward();
    (used * 2.0).sum().backward();
    dp.finish_backward();
    const nn::NamedTensors stepped = dp.optimizer_parameters();
    CHECK(stepped[0].second.grad().defined());
    CHECK(!stepped[1].second.grad().defined());
    CHECK(!unused.grad().defined());
    opt.step();
    dp.gather_parameters();
    CHECK(unused.to_vector<float>() == std::vector<float>(3, 1.0f));  // no decay: not stepped
    CHECK(used.to_vector<float>()[0] == doctest::Approx(1.0 - 0.5 * (2.0 + 0.1)));
  }
}

TEST_CASE("data parallel: bad use raises typed errors and leaks nothing") {
  auto one = dist::simulated_group();
  Tensor a = zeros({3}).requires_grad_(), b = zeros({2}, TensorOptions(kFloat16)).requires_grad_();
  const int64_t before = memory_stats(kCPU).allocated;
  CHECK_THROWS_AS(dist::DataParallel({{"a", a}}, *one, dist::DataParallelOptions().zero_stage(4)), ValueError);
  CHECK_THROWS_AS(dist::DataParallel({{"a", a}}, *one, dist::DataParallelOptions().zero_stage(2).offload_parameters()),
                  ValueError);                                                  // offload is stage 3's schedule
  CHECK_THROWS_AS(dist::DataParallel({{"a", a}, {"b", b}}, *one), DTypeError);  // half and float32 mixed
  CHECK_THROWS_AS(dist::DataParallel({{"a", a}, {"a again", a}}, *one), ValueError);
  CHECK_THROWS_AS(dist::DataParallel({{"x", zeros({3})}}, *one), ValueError);  // no grad
  {
    dist::DataParallel dp({{"a", a}}, *one);
    a.sum().backward();
    CHECK_THROWS_AS(a.sum().backward(), AutogradError);  // two backward passes, no finish_backward between
    dp.finish_backward();
    optim::SGD foreign({zeros({3}).requires_grad_()});
    CHECK_THROWS_AS(dp.state_dict(foreign), ValueError);
    optim::SGD opt(dp.optimizer_parameters(), optim::SGDOptions(0.1).momentum(0.9));
    // (stage 0: the whole state goes to the optimizer, which checks its shapes)
    CHECK_THROWS_AS(dp.load_state_dict(opt, {{"state.0.momentum_buffer", zeros({4})}}), ShapeError);
    CHECK_THROWS_AS(dp.load_state_dict(opt, {{"state.9.momentum_buffer", zeros({3})}}), ValueError);
    a.set_grad(Tensor());
  }
  CHECK(memory_stats(kCPU).allocated == before);
}
