// Gradient accumulation: instead of one backward over a batch of B rows, run k micro-batches of
// B / k rows, each loss scaled by 1 / k, and let backward add into the same .grad buffers. The
// gradients are those of the big batch (up to float rounding: the sums run in another order);
// the activations held at any moment are those of one micro-batch, so the Activation peak is
// divided by k. Parameters, gradients and optimizer state do not change.
//
// The model: fc1 (128 -> 512), ReLU, fc2 (512 -> 128), mse loss against zeros. Per row, autograd
// saves relu's output (512 floats) and the loss's d = y - 0 (128 floats):
// Activation peak = rows x (512 + 128) x 4 bytes. (fc1's input x is the user's
// data, an Input; its micro-batch slices are views of it, so they allocate nothing.)
//
//   grad_accumulation [batch] [micro_batches]     defaults: 256 4
#include <cstdlib>

#include "ledger.h"

namespace {

constexpr int64_t kIn = 128, kHidden = 512;

struct Measured {
  int64_t activation_peak, gradient, step_peak;
  std::vector<mg::Tensor> grads;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 256, k = argc > 2 ? std::atoll(argv[2]) : 4;
  if (k < 1 || batch % k) {
    std::fprintf(stderr, "expected a batch divisible by the number of micro-batches\n");
    return 2;
  }
  mg::manual_seed(0);
  mg::nn::Sequential model;
  model.emplace_back<mg::nn::Linear>(kIn, kHidden);
  model.emplace_back<mg::nn::ReLU>();
  model.emplace_back<mg::nn::Linear>(kHidden, kIn);
  mg::Tensor x = mg::randn({batch, kIn}), target = mg::zeros({batch, kIn});

  // One optimizer step's worth of gradients from `micro` micro-batches.
  auto run = [&](int64_t micro) {
    model.zero_grad();  // set_to_none: no .grad buffers before the first backward
    const mg::MemoryStats start = mg::memory_stats();
    mg::reset_peak();
    const int64_t rows = batch / micro;
    for (int64_t i = 0; i < micro; ++i) {
      mg::Tensor xi = x.narrow(0, i * rows, rows), ti = target.narrow(0, i * rows, rows);  // views, no copies
      mg::Tensor loss = mg::mse_loss(model(xi), ti) * (1.0 / double(micro));
      loss.backward();  // adds into .grad
    }
    const mg::MemoryStats s = mg::memory_stats();
    Measured m{s.peak(mg::Category::Activation) - start.category(mg::Category::Activation),
               s.category(mg::Category::Gradient) - start.category(mg::Category::Gradient),
               s.peak_allocated - start.allocated,
               {}};
    for (auto& p : model.parameters()) m.grads.push_back(p.grad().clone());
    return m;
  };

  Measured big = run(1), acc = run(k);
  const int64_t rows = batch / k, params = 4 * (2 * kIn * kHidden + kHidden + kIn);
  std::printf("batch %lld as 1 batch vs %lld micro-batches of %lld rows\n\n", (long long)batch, (long long)k,
              (long long)rows);
  std::printf("%-28s %16s %12s %12s\n", "", "Activation peak", "Gradient", "step peak");
  std::printf("%-28s %16lld %12lld %12lld\n", ("1 x " + std::to_string(batch) + " rows").c_str(),
              (long long)big.activation_peak, (long long)big.gradient, (long long)big.step_peak);
  std::printf("%-28s %16lld %12lld %12lld\n\n",
              (std::to_string(k) + " x " + std::to_string(rows) + " rows, accumulated").c_str(),
              (long long)acc.activation_peak, (long long)acc.gradient, (long long)acc.step_peak);

  demo::check_bytes(big.activation_peak, batch * (kHidden + kIn) * 4, "one batch, Activation peak");
  demo::check_bytes(acc.activation_peak, rows * (kHidden + kIn) * 4, "micro-batches, Activation peak");
  demo::check_bytes(acc.gradient, params, "micro-batches, Gradient (one .grad per parameter, as before)");
  demo::check_bytes(big.gradient, params, "one batch, Gradient");
  bool same = true;
  for (size_t i = 0; i < big.grads.size(); ++i) same = same && mg::allclose(big.grads[i], acc.grads[i], 1e-4, 1e-6);
  demo::check(same, "accumulated gradients equal the big batch's (rtol 1e-4)");
  demo::check(acc.step_peak < big.step_peak, "the step's peak is lower");
  return demo::exit_code();
}
