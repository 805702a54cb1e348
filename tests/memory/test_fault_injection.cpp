// Fault injection: one training step (train::train_step, as memgrad train runs it) with an
// allocation failure injected at each of its allocations in turn (memory::fail_allocation_after).
// Every failure must be an OutOfMemoryError, leave the ledger where it was before the step (to the
// byte, per category and per owner) and the generator where it was, and the step run afterwards
// must give bit for bit what the same step gives in a run that never failed. Checked for the
// first step (the optimizer creates its state) and a later one, under several configurations:
// recompute segments with dropout and clipping, fp16 loss scaling with accumulation, bf16 with
// AMSGrad.
#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include <memgrad/memgrad.h>

using namespace mg;

namespace {

struct Config {
  std::string name;
  train::ModelSpec spec;
  train::InputShape shape;
  train::StepOptions step;
  train::Policy policy;
  bool scaler = false;
};

std::vector<Config> configs() {
  nn::GPTConfig g;
  g.vocab_size = 64, g.block_size = 8, g.n_layer = 2, g.n_head = 2, g.n_embd = 16, g.dropout = 0.1;
  train::StepOptions adamw;
  adamw.optimizer = optim::OptimizerSpec("adamw"), adamw.clip_norm = 1.0;
  train::StepOptions fp16;
  fp16.optimizer = optim::OptimizerSpec("sgd", 0.9), fp16.precision = train::Precision::Float16, fp16.accum = 2;
  train::StepOptions bf16;
  bf16.optimizer = optim::OptimizerSpec("adam"), bf16.precision = train::Precision::BFloat16;
  nn::GPTConfig fused = g;
  fused.fused_attention = true;
  return {
      {"gpt, adamw, clip, dropout, every block recomputed",
       train::ModelSpec::gpt_model(g),
       {2, 8},
       adamw,
       train::Policy::every_block(2),
       false},
      {"gpt, fused attention, sgd momentum, fp16 scaler, accum 2, selective",
       train::ModelSpec::gpt_model(fused),
       {2, 8},
       fp16,
       train::Policy::selective_only(),
       true},
      {"mlp, adam, bf16, sqrt segments", train::ModelSpec::mlp(4, 16), {4, 1}, bf16, train::Policy::sqrt_n(4), false},
  };
}

// A model with its optimizer, scaler and position of the default generator (which the runs share:
// enter() puts this run's position in it, leave() keeps where the run's step left it).
struct Run {
  std::optional<train::ChainModel> chain;
  std::unique_ptr<optim::Optimizer> opt;
  std::optional<amp::GradScaler> scaler;
  uint64_t seed, offset = 0;
  void enter() const {
    default_generator().manual_seed(seed);
    default_generator().set_offset(offset);
  }
  void leave() { offset = default_generator().offset(); }
  Run(const Config& c, uint64_t seed_) : seed(seed_) {
    manual_seed(seed);
    chain.emplace(c.spec, kCPU);
    auto params = chain->module().named_parameters();
    if (c.step.optimizer.name == "sgd")
      opt = std::make_unique<optim::SGD>(params, optim::SGDOptions(0.05).momentum(0.9));
    else if (c.step.optimizer.name == "adam")
      opt = std::make_unique<optim::Adam>(params, optim::AdamOptions(1e-2).amsgrad());
    else
      opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions(1e-2));
    if (c.scaler) scaler.emplace(amp::GradScalerOptions().init_scale(256));
    leave();
  }
  // One step on fixed batches (built inside the step, as memgrad train does).
  double step(const Config& c, int64_t index) {
    auto batch = [&](int64_t micro) {
      std::mt19937 rng(uint32_t(index * 100 + micro));
      const bool gpt = c.spec.kind == train::ModelSpec::Kind::GPT;
      const int64_t n = c.shape.batch * (gpt ? c.shape.seq_len : c.spec.mlp_width);
      if (gpt) {
        std::vector<int64_t> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
        for (size_t i = 0; i < x.size(); ++i) x[i] = int64_t(rng() % 64), y[i] = int64_t(rng() % 64);
        return std::pair{tensor(x, {c.shape.batch, c.shape.seq_len}), tensor(y, {c.shape.batch, c.shape.seq_len})};
      }
      std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
      std::normal_distribution<float> normal;
      for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng), y[i] = normal(rng);
      return std::pair{tensor(x, {c.shape.batch, c.spec.mlp_width}), tensor(y, {c.shape.batch, c.spec.mlp_width})};
    };
    return train::train_step(*chain, opt.get(), scaler ? &*scaler : nullptr, batch, c.policy, c.step);
  }
  // Everything that must match between runs, as numbers.
  std::map<std::string, std::vector<double>> contents() const {
    std::map<std::string, std::vector<double>> r;
    for (auto& [k, t] : chain->module().state_dict()) r["model." + k] = t.to_vector<double>();
    for (auto& [k, t] : opt->state_dict()) r["optim." + k] = t.to_vector<double>();
    if (scaler)
      for (auto& [k, v] : scaler->state_dict()) r["scaler." + k] = {v};
    r["generator"] = {double(offset)};
    return r;
  }
};

struct Level {
  int64_t allocated, requested;
  CategoryBytes by_category;
  std::map<std::string, int64_t> by_owner;
  uint64_t generator_offset;
  static Level now() {
    const MemoryStats s = memory_stats(kCPU);
    return {s.allocated, s.requested, s.by_category, memory_by_owner(kCPU), default_generator().offset()};
  }
  bool operator==(const Level& o) const {
    return allocated == o.allocated && requested == o.requested && by_category == o.by_category &&
           by_owner == o.by_owner && generator_offset == o.generator_offset;
  }
};

std::ostream& operator<<(std::ostream& os, const Level& l) {
  os << "allocated " << l.allocated << ", requested " << l.requested << ", generator at " << l.generator_offset
     << ", owners:";
  for (auto& [o, n] : l.by_owner) os << " " << o << "=" << n;
  return os;
}

// Disarms the hook however the test ends.
struct Disarm {
  ~Disarm() { memory::fail_allocation_after(0); }
};

}  // namespace

TEST_CASE("fault injection: an allocation failure anywhere in a training step leaves no trace") {
  Disarm disarm;
  for (const Config& c : configs()) {
    CAPTURE(c.name);
    Run reference(c, 11), faulty(c, 11);
    for (int64_t step = 1; step <= 2; ++step) {
      CAPTURE(step);
      reference.enter();
      const double expected = reference.step(c, step);
      reference.leave();
      faulty.enter();
      faulty.chain->module().zero_grad();  // as memgrad train does before each step (the step would too)
      const Level before = Level::now();
      int64_t failures = 0;
      std::optional<double> loss;
      for (int64_t n = 1; !loss; ++n) {
        CAPTURE(n);
        memory::fail_allocation_after(n);
        try {
          loss = faulty.step(c, step);
        } catch (const OutOfMemoryError& e) {
          ++failures;
          REQUIRE(std::string(e.what()).find("injected") != std::string::npos);
          REQUIRE(memory::allocations_until_failure() == 0);
          REQUIRE(Level::now() == before);
        } catch (const std::exception& e) {
          FAIL("allocation " << n << " failed with " << typeid(e).name() << ": " << e.what());
        }
      }
      CHECK(memory::allocations_until_failure() == 1);  // the countdown outlived the step: it never fired
      memory::fail_allocation_after(0);
      faulty.leave();
      MESSAGE(c.name << ", step " << step << ": " << failures << " allocations, each failed in turn");
      CHECK(failures > 20);
      CHECK(*loss == expected);
      CHECK(faulty.contents() == reference.contents());
    }
  }
}
