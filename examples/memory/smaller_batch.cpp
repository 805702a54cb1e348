// A smaller batch: the simplest cut. Activations grow linearly with the batch; parameters,
// gradients and optimizer state do not depend on it at all. So halving the batch halves the
// Activation bytes and nothing else (and, with fewer rows per step, changes the optimisation:
// gradient accumulation, see grad_accumulation.cpp, keeps the batch and still cuts activations).
//
// The model: fc1 (128 -> 512), ReLU, fc2 (512 -> 128), mse loss against zeros, one AdamW step.
// Per row autograd saves relu's output (512 floats) and the loss's d (128 floats):
// Activation peak = batch x (512 + 128) x 4 bytes.
//
//   smaller_batch [largest_batch]     default 256 (then 128, 64, 32)
#include <cstdlib>

#include "ledger.h"

namespace {
constexpr int64_t kIn = 128, kHidden = 512;
}  // namespace

int main(int argc, char** argv) {
  const int64_t largest = argc > 1 ? std::atoll(argv[1]) : 256;
  const int64_t params = 2 * kIn * kHidden + kHidden + kIn;
  std::printf("fc1 %lld -> %lld, ReLU, fc2 -> %lld (%lld parameters), one AdamW step\n\n", (long long)kIn,
              (long long)kHidden, (long long)kIn, (long long)params);
  std::printf("%8s %16s %12s %12s %12s %12s\n", "batch", "Activation peak", "Parameter", "Gradient", "OptState",
              "step peak");
  for (int64_t batch = largest; batch >= largest / 8 && batch > 0; batch /= 2) {
    mg::manual_seed(0);
    const mg::MemoryStats start = mg::memory_stats();
    mg::reset_peak();
    mg::nn::Sequential model;
    model.emplace_back<mg::nn::Linear>(kIn, kHidden);
    model.emplace_back<mg::nn::ReLU>();
    model.emplace_back<mg::nn::Linear>(kHidden, kIn);
    mg::optim::AdamW opt(model.named_parameters());
    mg::Tensor x = mg::randn({batch, kIn}), target = mg::zeros({batch, kIn});
    mg::mse_loss(model(x), target).backward();
    opt.step();
    const mg::MemoryStats s = mg::memory_stats();
    auto held = [&](mg::Category c) { return s.category(c) - start.category(c); };
    const int64_t activation = s.peak(mg::Category::Activation) - start.category(mg::Category::Activation);
    std::printf("%8lld %16lld %12lld %12lld %12lld %12lld\n", (long long)batch, (long long)activation,
                (long long)held(mg::Category::Parameter), (long long)held(mg::Category::Gradient),
                (long long)held(mg::Category::OptimizerState), (long long)(s.peak_allocated - start.allocated));
    if (activation != batch * (kHidden + kIn) * 4 || held(mg::Category::Parameter) != 4 * params ||
        held(mg::Category::Gradient) != 4 * params || held(mg::Category::OptimizerState) != 8 * params) {
      demo::check(false, "batch " + std::to_string(batch) + ": bytes differ from the hand arithmetic");
    }
  }
  std::printf("\n");
  demo::check(demo::failures() == 0,
              "every row: Activation = batch x 2560; Parameter = Gradient = 4 x params; OptState = 8 x params");
  return demo::exit_code();
}
