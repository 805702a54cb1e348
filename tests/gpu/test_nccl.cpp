// NCCL at world size 1 (one GPU): every collective on cuda tensors, on the group's own stream, and
// data-parallel training over it at each ZeRO stage (3: the units gathered and reduced over NCCL)
// against plain training on the same device; parameter offload on cuda (pinned host memory, copies on
// a side stream) against plain training, and its device peaks planned on meta against the GPU's.
// Several GPUs (world size > 1 over NCCL) are not covered here: see the report of issue 19.
#include <random>

#include "gpu_util.h"

namespace dist = mg::distributed;
using namespace gpu_test;

TEST_CASE("nccl: built or not, asking for it says what is missing [no-gpu]") {
  if (!dist::nccl_built()) CHECK_THROWS_AS(dist::new_nccl_group(dist::world(), 0), DeviceError);
}

TEST_CASE("nccl: the collectives of one rank on cuda, on the group's stream") {
  if (!dist::nccl_built()) return;
  auto alone = dist::simulated_group();
  auto g = dist::new_nccl_group(*alone, 0);
  CHECK(g->backend() == "nccl");
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64}) {
    INFO(dtype_name(dt));
    Tensor t = arange(0, 12, 1, TensorOptions(dt).device(kGPU));
    Tensor want = t.to(kCPU);
    g->all_reduce(t).wait();  // one rank: the sum is itself
    CHECK(t.to(kCPU).to_vector<double>() == want.to_vector<double>());
    Tensor out = zeros({12}, TensorOptions(dt).device(kGPU));
    g->all_gather(out, t).wait();
    CHECK(out.to(kCPU).to_vector<double>() == want.to_vector<double>());
    Tensor rs = zeros({12}, TensorOptions(dt).device(kGPU));
    g->reduce_scatter(rs, t, dist::ReduceOp::Max).wait();
    CHECK(rs.to(kCPU).to_vector<double>() == want.to_vector<double>());
    g->broadcast(t, 0).wait();
    CHECK(t.to(kCPU).to_vector<double>() == want.to_vector<double>());
  }
  // A collective sees what the current stream wrote before it, and what follows sees its result.
  Tensor big = ones({1 << 20}, TensorOptions(kGPU));
  big.mul_(3.0);
  dist::Work w = g->all_reduce(big);
  w.wait();
  big.add_(1.0);
  CHECK(big.sum().item<double>() == 4.0 * double(1 << 20));
  g->barrier();
  CHECK(g->all_reduce(2.5) == 2.5);                        // host values over the bootstrap group
  CHECK_THROWS_AS(g->all_reduce(ones({2})), DeviceError);  // cpu tensors travel over MPI
}

TEST_CASE("nccl: data parallel on one GPU trains as plain training does, at every ZeRO stage (3 too)") {
  if (!dist::nccl_built()) return;
  auto alone = dist::simulated_group();
  auto g = dist::new_nccl_group(*alone, 0);
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  const train::ModelSpec spec = train::ModelSpec::gpt_model(c);
  auto run = [&](int zero, bool data_parallel) {
    manual_seed(9);
    train::ChainModel chain(spec, kGPU);
    std::unique_ptr<dist::DataParallel> dp;
    nn::NamedTensors params = chain.module().named_parameters();
    if (data_parallel) {
      dp = std::make_unique<dist::DataParallel>(
          params, *g, dist::DataParallelOptions().zero_stage(zero).bucket_bytes(4096).units(chain.unit_names()));
      params = dp->optimizer_parameters();
    }
    optim::AdamW opt(params, optim::AdamWOptions(1e-2));
    train::StepOptions o;
    o.accum = 2;
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step)
      losses.push_back(train::train_step(
          chain, &opt, nullptr,
          [step](int64_t m) {  // micro-batch m of step `step`, from those alone
            std::mt19937_64 rng(uint64_t(100 * step + m));
            std::vector<int64_t> x(16), y(16);
            for (size_t i = 0; i < 16; ++i) x[i] = int64_t(rng() % 64), y[i] = int64_t(rng() % 64);
            return std::make_pair(tensor(x, {2, 8}).to(kGPU), tensor(y, {2, 8}).to(kGPU));
          },
          train::Policy::none(), o, dp.get()));
    return losses;
  };
  const std::vector<double> plain = run(0, false);
  for (int zero : {0, 1, 2, 3}) {  // 3: each block gathered over NCCL for its forward and backward
    INFO("ZeRO-" << zero);
    const std::vector<double> dp = run(zero, true);
    for (size_t i = 0; i < plain.size(); ++i) CHECK(dp[i] == doctest::Approx(plain[i]).epsilon(1e-6));
  }
}

TEST_CASE("parameter offload on cuda: pinned host shards, copies on a side stream; the plan's device peaks") {
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  const train::ModelSpec spec = train::ModelSpec::gpt_model(c);
  auto run = [&](bool offload, int64_t* peak) {
    manual_seed(9);
    train::ChainModel chain(spec, kGPU);
    train::StepOptions o;
    o.accum = 2, o.clip_norm = 1.0, o.offload_params = offload, o.units = chain.unit_names();
    train::Trainer trainer(chain.module(), o);
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      reset_peak(kGPU);
      const int64_t before = memory_stats(kGPU).allocated;
      losses.push_back(train::train_step(
          chain, trainer,
          [step](int64_t m) {
            std::mt19937_64 rng(uint64_t(100 * step + m));
            std::vector<int64_t> x(16), y(16);
            for (size_t i = 0; i < 16; ++i) x[i] = int64_t(rng() % 64), y[i] = int64_t(rng() % 64);
            return std::make_pair(tensor(x, {2, 8}).to(kGPU), tensor(y, {2, 8}).to(kGPU));
          },
          train::Policy::none()));
      *peak = memory_stats(kGPU).peak_allocated - before;
    }
    if (offload) {
      CHECK(cuda::pinned_bytes() >= host_memory_stats(kGPU).allocated);  // the host side is page-locked
      CHECK(host_memory_stats(kGPU).category(Category::OptimizerState) > 0);
    }
    return losses;
  };
  int64_t plain_peak = 0, offload_peak = 0;
  const std::vector<double> plain = run(false, &plain_peak), offloaded = run(true, &offload_peak);
  for (size_t i = 0; i < plain.size(); ++i) CHECK(offloaded[i] == doctest::Approx(plain[i]).epsilon(1e-6));
  CHECK(offload_peak < plain_peak);
  // Planned on meta for cuda, measured on the GPU: the same device peaks, to the byte.
  train::StepOptions o;
  o.offload_params = true;
  plan::StepContext ctx = plan::context({2, 8});
  plan::PlanOptions po;
  po.device = DeviceType::CUDA, po.smallest_limit = false;
  const plan::StepReport planned = plan::plan(plan::program(spec, {2, 8}, o), ctx, po);
  ctx.device = kGPU;
  const plan::StepReport measured = plan::measure(plan::program(spec, {2, 8}, o), ctx, po);
  CHECK(measured.peak == planned.peak);
  CHECK(measured.first_peak == planned.first_peak);
  CHECK(measured.reserved == planned.reserved);
}
