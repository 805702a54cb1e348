// Data parallelism and ZeRO, measured on each rank: run it under `mpirun -np 2` (or more). Every
// rank trains the same GPT on its own micro-batch. Stages 0-2: every rank holds the whole model and
// the gradients are summed across ranks in buckets while backward runs; stage 1 keeps on each rank
// only its slice of the optimizer state, stage 2 also only its slice of the gradients. Stage 3 shards
// the parameters themselves: each block (and the rest, the root) is one unit, laid end to end and cut
// into N equal chunks, and each rank keeps only its chunk, gathering a unit for its forward and
// backward (Rajbhandari et al. 2020). Each rank reads its own ledger after one step and checks it
// against the hand arithmetic:
//   Parameter       stages 0-2: the whole model, sum of round512(4 n) over the parameters;
//                   stage 3: round512(4 c) per unit, c = ceil(unit elements / N)
//   Gradient        stage 0-1: one buffer per bucket, round512(4 x the bucket's elements);
//                   stage 2:   this rank's slice of each bucket, round512(4 x the bucket's chunk),
//                   a chunk being the sum of its parameters' slice sizes c = ceil(n / N);
//                   stage 3:   round512(4 c) per unit
//   OptimizerState  AdamW's two moments: 2 round512(4 n) per parameter at stage 0, and of this
//                   rank's slice only, 2 round512(4 len), at stages 1-3 (stage 3: the part of the
//                   parameter inside this rank's chunk of its unit)
// and the same for a model stored in float16 with float32 masters (ZeRO's mixed precision: 2 + 2 +
// 12 bytes per parameter, the 12 sharded, and all 16 at stage 3). Rank 0 prints every rank's figures.
//
//   mpirun -np 2 zero_sharding        (alone it says so and exits 77: nothing to shard)
#include <functional>
#include <map>

#include "ledger.h"

namespace dist = mg::distributed;

namespace {

int64_t rounded(int64_t bytes) { return int64_t(mg::memory::round_size(size_t(bytes))); }

struct Held {
  int64_t parameter, gradient, state, peak, workspace_peak;
};

// By hand, from the parameters, the bucket layout or the units, and this rank's slices.
Held by_hand(const dist::DataParallel& dp, const mg::train::ChainModel& chain, int64_t element, bool masters) {
  const mg::nn::NamedTensors params = chain.module().named_parameters();
  Held h{0, 0, 0, 0, 0};
  for (size_t i = 0; i < params.size(); ++i) {
    if (dp.zero_stage() < 3) h.parameter += rounded(params[i].second.numel() * element);
    const auto [begin, end] = dp.slice(i, dp.rank());
    const int64_t len = dp.zero_stage() == 0 ? params[i].second.numel() : end - begin;
    if (len > 0) h.state += (masters ? 3 : 2) * rounded(len * (masters ? 4 : element));  // (master,) 2 moments
  }
  if (dp.zero_stage() == 3) {  // the units: each block, and the root (the parameters in no block)
    std::vector<std::string> units = chain.unit_names();
    std::vector<int64_t> elements(units.size() + 1, 0);
    for (auto& [name, t] : params) {
      size_t k = 0;
      while (k < units.size() && name.rfind(units[k] + ".", 0) != 0) ++k;
      elements[k] += t.numel();
    }
    for (int64_t n : elements) {
      const int64_t c = (n + dp.world_size() - 1) / dp.world_size();
      h.parameter += rounded(c * element), h.gradient += rounded(c * element);
    }
  }
  for (const dist::BucketLayout& b : dp.buckets())
    h.gradient += rounded((dp.zero_stage() == 2 ? b.chunk : b.elements) * element);
  return h;
}

// One training step of `chain` on this rank's micro-batch (x, y) with ZeRO stage `zero`; what it holds
// after. `before_model`: the ledger before the model was built (its parameters count from there).
Held measure(mg::train::ChainModel& chain, const mg::Tensor& x, const mg::Tensor& y, int zero, bool masters,
             const mg::MemoryStats& before_model, Held* hand) {
  const mg::MemoryStats start = mg::memory_stats();
  dist::DataParallel dp(chain.module().named_parameters(), dist::world(),
                        dist::DataParallelOptions().zero_stage(zero).bucket_bytes(256 << 10).units(chain.unit_names()));
  mg::optim::AdamW opt(dp.optimizer_parameters());
  mg::reset_peak();
  mg::train::train_step(
      chain, &opt, nullptr, [&](int64_t) { return std::make_pair(x, y); }, mg::train::Policy::none(), {}, &dp);
  const mg::MemoryStats s = mg::memory_stats();
  auto held = [&](mg::Category c) { return s.category(c) - start.category(c); };
  *hand = by_hand(dp, chain, masters ? 2 : 4, masters);
  // Stage 3's shards replace the parameters, which were counted before the step.
  const int64_t parameter = s.category(mg::Category::Parameter) - before_model.category(mg::Category::Parameter);
  return {parameter, held(mg::Category::Gradient), held(mg::Category::OptimizerState),
          s.peak_allocated - start.allocated,
          s.peak(mg::Category::Workspace) - start.category(mg::Category::Workspace)};
}

}  // namespace

int main() {
  if (dist::launched_world_size() < 2) {
    std::printf("zero_sharding: run it under mpirun -np 2 (or more); alone there is nothing to shard\n");
    return 77;
  }
  dist::ProcessGroup& world = dist::world();
  const int rank = world.rank(), ranks = world.size();
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;

  // fp32: a GPT (train::ChainModel, which runs its blocks as stage 3's units), built afresh for each
  // stage; every rank seeds alike (DataParallel broadcasts rank 0's values anyway).
  mg::nn::GPTConfig c;
  c.n_layer = 2, c.n_head = 4, c.n_embd = 128, c.vocab_size = 256, c.block_size = 32;
  const mg::train::ModelSpec gpt = mg::train::ModelSpec::gpt_model(c);
  const int64_t psi = mg::train::ChainModel(gpt, mg::kMeta).module().num_parameters();
  mg::manual_seed(100 + uint64_t(rank));  // each rank its own micro-batch
  mg::Tensor x = mg::randint(0, 256, {4, 32}), y = mg::randint(0, 256, {4, 32});
  std::printf(
      "ZeRO on %d ranks: GPT (%lld layers, n_embd %lld, vocab %lld; %lld parameters), AdamW, float32,\n"
      "one micro-batch of 4 x 32 tokens per rank, buckets of 256 KiB. Bytes each rank's ledger holds after "
      "one step:\n\n",
      ranks, (long long)c.n_layer, (long long)c.n_embd, (long long)c.vocab_size, (long long)psi);
  std::printf("%-5s %-4s %11s %11s %15s %11s %10s %12s %16s\n", "stage", "rank", "Parameter", "Gradient",
              "OptimizerState", "total", "B / param", "step peak", "Workspace peak");
  std::map<int, int64_t> totals;
  for (int zero : {0, 1, 2, 3}) {
    const mg::MemoryStats before = mg::memory_stats();
    mg::manual_seed(0);
    mg::train::ChainModel chain(gpt, mg::kCPU);
    Held hand;
    const Held m = measure(chain, x, y, zero, false, before, &hand);
    const std::vector<int64_t> all = world.all_gather({m.parameter, m.gradient, m.state, m.peak, m.workspace_peak});
    for (int r = 0; r < ranks; ++r) {
      const int64_t* v = &all[size_t(r) * 5];
      std::printf("%-5d %-4d %11lld %11lld %15lld %11lld %10.2f %12lld %16lld\n", zero, r, (long long)v[0],
                  (long long)v[1], (long long)v[2], (long long)(v[0] + v[1] + v[2]),
                  double(v[0] + v[1] + v[2]) / double(psi), (long long)v[3], (long long)v[4]);
    }
    const std::string where = "stage " + std::to_string(zero) + ", rank " + std::to_string(rank);
    demo::check_bytes(m.parameter, hand.parameter, where + ": Parameter");
    demo::check_bytes(m.gradient, hand.gradient, where + ": Gradient");
    demo::check_bytes(m.state, hand.state, where + ": OptimizerState");
    totals[zero] = m.parameter + m.gradient + m.state;
  }
  std::printf(
      "\nZeRO's formula per parameter, N = %d: stage 0 4 + 4 + 8 = 16, stage 1 4 + 4 + 8/N = %.2f, "
      "stage 2 4 + (4 + 8)/N = %.2f, stage 3 (4 + 4 + 8)/N = %.2f\n",
      ranks, 8.0 + 8.0 / ranks, 4.0 + 12.0 / ranks, 16.0 / ranks);
  demo::check(totals[1] < totals[0] && totals[2] < totals[1] && totals[3] < totals[2],
              "each stage holds less than the one before");

  // Mixed precision: float16 parameters, float32 masters sliced with the optimizer state.
  const mg::train::ModelSpec mlp = mg::train::ModelSpec::mlp(2, 512);
  const int64_t psi16 = mg::train::ChainModel(mlp, mg::kMeta).module().num_parameters();
  mg::Tensor h = mg::randn({16, 512}) * double(rank + 1), target = mg::zeros({16, 512});
  std::printf("\nfloat16 parameters with float32 masters (2 Linear(512, 512), %lld parameters), AdamW:\n\n",
              (long long)psi16);
  std::printf("%-5s %-4s %11s %11s %15s %11s %10s %10s\n", "stage", "rank", "Parameter", "Gradient", "OptimizerState",
              "total", "B / param", "paper");
  for (int zero : {0, 1, 2, 3}) {
    const mg::MemoryStats before = mg::memory_stats();
    mg::manual_seed(1);
    mg::train::ChainModel chain(mlp, mg::kCPU);
    chain.module().to(mg::kFloat16);
    Held hand;
    const Held m = measure(chain, h, target, zero, true, before, &hand);
    const std::vector<int64_t> all = world.all_gather({m.parameter, m.gradient, m.state});
    const double paper = mg::plan::zero_bytes_per_parameter(2, 2, 12, zero, ranks);
    for (int r = 0; r < ranks; ++r) {
      const int64_t* v = &all[size_t(r) * 3];
      std::printf("%-5d %-4d %11lld %11lld %15lld %11lld %10.2f %10.2f\n", zero, r, (long long)v[0], (long long)v[1],
                  (long long)v[2], (long long)(v[0] + v[1] + v[2]), double(v[0] + v[1] + v[2]) / double(psi16), paper);
    }
    const std::string where = "fp16 + masters, stage " + std::to_string(zero) + ", rank " + std::to_string(rank);
    demo::check_bytes(m.parameter, hand.parameter, where + ": Parameter");
    demo::check_bytes(m.gradient, hand.gradient, where + ": Gradient");
    demo::check_bytes(m.state, hand.state, where + ": OptimizerState (masters + moments)");
  }
  const int failed = int(world.all_reduce(double(demo::failures()), dist::ReduceOp::Max));
  return failed ? 1 : demo::exit_code();
}
