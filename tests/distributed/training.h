// What the distributed suites share: a tiny GPT, micro-batches every process builds alike, and the
// comparison of two training runs.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include <memgrad/memgrad.h>

namespace mg_test {

using namespace mg;

inline train::ModelSpec tiny_gpt(double dropout = 0.1) {
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.dropout = dropout;
  return train::ModelSpec::gpt_model(c);
}
inline const train::InputShape kShape{2, 8};

// Micro-batch g of step s: token ids drawn from (s, g) alone, so every process builds the same one.
inline std::pair<Tensor, Tensor> batch(int64_t s, int64_t g) {
  std::mt19937_64 rng(uint64_t(s) * 1000 + uint64_t(g));
  std::vector<int64_t> x, y;
  for (int64_t i = 0; i < kShape.batch * kShape.seq_len; ++i)
    x.push_back(int64_t(rng() % 64)), y.push_back(int64_t(rng() % 64));
  return {tensor(x, {kShape.batch, kShape.seq_len}), tensor(y, {kShape.batch, kShape.seq_len})};
}

struct Run {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
  optim::StateDict state;  // the optimizer's, gathered to whole parameters
};

// Loads a Run's state (model.*, optim.*, rng) into `model` and `opt`, through `dp` when given (each
// rank taking its slices or pieces).
inline void load_run_state(const optim::StateDict& state, nn::Module& model, optim::Optimizer& opt,
                           distributed::DataParallel* dp) {
  nn::StateDict m;
  optim::StateDict o;
  for (auto& [k, t] : state) {
    if (k.rfind("model.", 0) == 0) m[k.substr(6)] = t;
    if (k.rfind("optim.", 0) == 0) o[k.substr(6)] = t;
  }
  dp ? dp->load_model_state_dict(model, m) : model.load_state_dict(m);
  dp ? dp->load_state_dict(opt, o) : opt.load_state_dict(o);
  default_generator().set_offset(uint64_t(state.at("rng").item<int64_t>()));
}

// Relative difference of two runs, over losses and parameters (0 when bitwise equal).
inline double difference(const Run& a, const Run& b, bool losses_only = false) {
  REQUIRE(a.losses.size() == b.losses.size());
  REQUIRE(a.params.size() == b.params.size());
  double worst = 0;
  auto rel = [](double x, double y) { return std::abs(x - y) / std::max(1.0, std::abs(y)); };
  for (size_t i = 0; i < a.losses.size(); ++i) worst = std::max(worst, rel(a.losses[i], b.losses[i]));
  for (size_t i = 0; i < a.params.size() && !losses_only; ++i)
    for (size_t j = 0; j < a.params[i].size(); ++j) worst = std::max(worst, rel(a.params[i][j], b.params[i][j]));
  return worst;
}

// Two runs agree: bitwise, or (sums of more than two terms meeting in another order) the losses to
// 1e-6 and the parameters to 1e-4 (Adam divides by the root of tiny second moments, which magnifies
// the last bits of small gradients).
inline void check_same(const Run& a, const Run& b, bool bitwise, const char* what) {
  INFO(what);
  if (bitwise) {
    CHECK(a.losses == b.losses);
    CHECK(difference(a, b) == 0.0);
  } else {
    CHECK(difference(a, b, true) < 1e-6);
    CHECK(difference(a, b) < 1e-4);
  }
}

}  // namespace mg_test
