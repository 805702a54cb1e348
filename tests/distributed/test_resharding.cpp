// Optimizer state that is not shaped like its parameter, under data parallelism (issue 40): 8-bit
// Adam's blocks and Adafactor's factored moments. Under mpirun ([mpi]): ZeRO-1/2 ranks keep exactly
// their blocks of one process's 8-bit state (slices start at multiples of the block, and the whole
// parameter decides 8-bit or float32), so the state they gather is one process's, bit for bit where
// the sums meet in the same order, and any world size and stage resumes it; Adafactor (stage 0 only)
// resumes at any world size too.
#include <doctest/doctest.h>

#include <memgrad/memgrad.h>

#include "distributed/training.h"

using namespace mg;
namespace dist = mg::distributed;
using namespace mg_test;

namespace {

enum class Kind { AdamW8bit, Adafactor };

std::unique_ptr<optim::Optimizer> make(Kind kind, const nn::NamedTensors& params) {
  // 256 elements and up in 8 bits: the tiny GPT's matrices (768 = 3 blocks, cut by 2 ranks at 384)
  if (kind == Kind::AdamW8bit)
    return std::make_unique<optim::AdamW8bit>(params, optim::AdamW8bitOptions(1e-2).min_8bit_size(256));
  return std::make_unique<optim::Adafactor>(params, optim::AdafactorOptions(1e-2));
}

// `steps` steps of the tiny GPT as memgrad train runs them (train::Trainer) from step `first` (from
// `resume`'s state when given): on `group`'s ranks at ZeRO stage `zero`, each running `accum`
// micro-batches, or in one process (null group).
Run train_run(Kind kind, dist::ProcessGroup* group, int zero, int64_t accum, int steps,
              const optim::StateDict* resume = nullptr, int first = 0) {
  manual_seed(1234);
  train::ChainModel chain(tiny_gpt(), kCPU);
  train::StepOptions o;
  o.optimizer = optim::OptimizerSpec(kind == Kind::AdamW8bit ? "adamw8bit" : "adafactor");
  o.accum = accum, o.zero_stage = zero;
  if (group) o.world_size = group->size(), o.rank = group->rank();
  train::Trainer trainer(
      chain.module(), o, [kind](const nn::NamedTensors& params) { return make(kind, params); }, group);
  dist::DataParallel* dp = trainer.data_parallel();
  if (resume) load_run_state(*resume, chain.module(), *trainer.optimizer(), dp);
  Run r;
  for (int step = first; step < first + steps; ++step)
    r.losses.push_back(train::train_step(
        chain, trainer, [step](int64_t g) { return batch(step, g); }, train::Policy::none()));
  for (auto& [name, t] : chain.module().named_parameters()) r.params.push_back(t.to_vector<float>());
  for (auto& [k, t] : chain.module().state_dict()) r.state["model." + k] = t.clone();
  for (auto& [k, t] : dp ? dp->state_dict(*trainer.optimizer()) : trainer.optimizer()->state_dict())
    r.state["optim." + k] = t.clone();
  r.state["rng"] = scalar_tensor(int64_t(default_generator().offset()), kInt64);
  return r;
}

// Every tensor of `a` is in `b` with the same shape, dtype and (`bitwise`) values.
void check_same_state(const optim::StateDict& a, const optim::StateDict& b, bool bitwise) {
  CHECK(a.size() == b.size());
  for (const auto& entry : a) {
    const std::string& k = entry.first;  // (a lambda cannot capture a binding)
    const Tensor& t = entry.second;
    INFO(k);
    REQUIRE(b.count(k));
    CHECK(b.at(k).shape() == t.shape());
    CHECK(b.at(k).dtype() == t.dtype());
    if (bitwise) CHECK(b.at(k).to_vector<double>() == t.to_vector<double>());
  }
}

}  // namespace

TEST_CASE("resharding [mpi]: ZeRO-1/2 keep one process's 8-bit blocks; the gathered state resumes anywhere") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  const bool two = n == 2;  // a sum of two gradients is the same in either order: bitwise
  const Run one = train_run(Kind::AdamW8bit, nullptr, 0, n, 2);
  for (int zero : {0, 1, 2}) {
    INFO("ZeRO-" << zero);
    const Run ranks = train_run(Kind::AdamW8bit, &g, zero, 1, 2);
    check_same(ranks, one, two, "N ranks against one process");
    check_same_state(ranks.state, one.state, two);  // uint8 codes, absmax per block of the whole parameter
    // Resumed from the ranks' state: in one process, and on the ranks at every stage.
    const Run whole = train_run(Kind::AdamW8bit, nullptr, 0, n, 4);
    Run rest = whole;
    rest.losses.erase(rest.losses.begin(), rest.losses.begin() + 2);
    check_same(train_run(Kind::AdamW8bit, nullptr, 0, n, 2, &ranks.state, 2), rest, two, "resumed in one process");
    for (int other : {0, 1, 2})
      check_same(train_run(Kind::AdamW8bit, &g, other, 1, 2, &one.state, 2), rest, two, "resumed on the ranks");
  }
}

TEST_CASE("resharding [mpi]: Adafactor's factored moments at stage 0 resume at any world size") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  const bool two = n == 2;
  const Run one = train_run(Kind::Adafactor, nullptr, 0, n, 2), ranks = train_run(Kind::Adafactor, &g, 0, 1, 2);
  check_same_state(ranks.state, one.state, two);
  const Run whole = train_run(Kind::Adafactor, nullptr, 0, n, 4);
  Run rest = whole;
  rest.losses.erase(rest.losses.begin(), rest.losses.begin() + 2);
  check_same(train_run(Kind::Adafactor, &g, 0, 1, 2, &one.state, 2), rest, two, "one process's state on the ranks");
  check_same(train_run(Kind::Adafactor, nullptr, 0, n, 2, &ranks.state, 2), rest, two, "the ranks' state alone");
}

TEST_CASE("resharding: 8-bit state in blocks the slices would cut is refused when the optimizer is attached") {
  auto group = dist::simulated_group(0, 3);
  train::ChainModel chain(tiny_gpt(), kMeta);  // a simulated rank moves meta tensors
  dist::DataParallel dp(chain.module().named_parameters(), *group, dist::DataParallelOptions().zero_stage(1));
  std::unique_ptr<optim::Optimizer> opt = make(Kind::AdamW8bit, dp.optimizer_parameters());
  CHECK_THROWS_WITH_AS(dp.attach(*opt), doctest::Contains("slice_multiple(256)"), ValueError);
}
