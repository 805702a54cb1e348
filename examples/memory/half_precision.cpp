// Half precision: what 16-bit floats change in the ledger, mode by mode, for one Adam step of a
// 3-layer MLP (Linear 256 -> 256, ReLU, Linear, ReLU, Linear; mse loss against zeros).
//
//   float32                plain training.
//   autocast fp16 / bf16   AutocastGuard around forward: the matmuls run on half copies of their
//                          inputs, and autograd saves those half copies; parameters, gradients and
//                          Adam's moments stay float32.
//   storage fp16 + scaler  model.to(kFloat16), float32 MasterWeights for the optimizer, GradScaler
//                          (loss scaling keeps small float16 gradients from flushing to zero).
//   storage bf16           the same in bfloat16, without a scaler (bfloat16 has float32's range).
//
// By hand, with N parameters and a = batch x 256 x 4 bytes (one float32 activation):
//   float32 saves relu1's and relu2's outputs and the loss's d = y - 0: 3a (fc1's input is the
//   user's x, an Input, not an Activation).
//   half storage saves the same three tensors in half: 3 (a / 2).
//   autocast saves the half copy of x (fc1 needs it for its weight's gradient), the two relu
//   outputs in half, the half copies of fc2's and fc3's weights (2 x 256 x 256 x 2 bytes: the price
//   of autocast), and d in float32 (losses run in float32): 3 (a / 2) + 2 (256 x 256 x 2) + a.
//
//   half_precision [batch]     default 64
#include <cmath>
#include <cstdlib>
#include <memory>

#include "ledger.h"

namespace {

constexpr int64_t W = 256;

struct Mode {
  const char* name;
  mg::DType storage;         // the parameters' dtype
  bool autocast;             // AutocastGuard around forward
  mg::DType autocast_dtype;  // its dtype
  bool scaler;               // GradScaler (float16 storage)
};

struct Measured {
  int64_t parameter, gradient, optimizer_state, activation, step_peak, skipped;
  double loss;
};

Measured run(const Mode& m, int64_t batch) {
  mg::manual_seed(1);
  const mg::MemoryStats start = mg::memory_stats();
  auto model = std::make_shared<mg::nn::Sequential>();
  model->emplace_back<mg::nn::Linear>(W, W);
  model->emplace_back<mg::nn::ReLU>();
  model->emplace_back<mg::nn::Linear>(W, W);
  model->emplace_back<mg::nn::ReLU>();
  model->emplace_back<mg::nn::Linear>(W, W);
  if (m.storage != mg::kFloat32) model->to(m.storage);

  // Half storage: float32 masters are what the optimizer updates (they count as OptimizerState).
  std::unique_ptr<mg::amp::MasterWeights> masters;
  std::unique_ptr<mg::optim::Adam> opt;
  if (m.storage != mg::kFloat32) {
    masters = std::make_unique<mg::amp::MasterWeights>(model->named_parameters());
    opt = std::make_unique<mg::optim::Adam>(masters->named_parameters());
  } else {
    opt = std::make_unique<mg::optim::Adam>(model->named_parameters());
  }
  mg::amp::GradScaler scaler(mg::amp::GradScalerOptions().enabled(m.scaler));

  mg::Tensor x, target;
  {
    mg::MemoryScope scope(mg::Category::Input);  // the data, in the model's dtype, counts as Input
    x = mg::randn({batch, W}).to(m.storage);
    target = mg::zeros({batch, W});
  }
  // Steps until one is taken: with float16 storage the scaler's first scale (2^16) makes some half
  // gradients overflow, so it skips those steps and halves the scale, as PyTorch's does.
  int64_t activation = 0, skipped = 0;
  mg::Tensor loss;
  for (int step = 0; step < 20; ++step) {
    model->zero_grad();
    opt->zero_grad();
    const int64_t act0 = mg::memory_stats().category(mg::Category::Activation);
    mg::reset_peak();
    {
      mg::amp::AutocastGuard guard(m.autocast_dtype, m.autocast);
      mg::Tensor y = (*model)(x);
      // Half storage computes the loss in half too, so that every saved tensor is half.
      loss = mg::mse_loss(y, target.to(m.storage));
      activation = mg::memory_stats().category(mg::Category::Activation) - act0;
    }
    scaler.scale(loss).backward();
    // With masters: unscale the half gradients into the float32 masters, step, copy back to half.
    const bool stepped = masters ? scaler.step(*opt, *masters) : scaler.step(*opt);
    scaler.update();
    if (stepped) break;
    ++skipped;
  }

  const mg::MemoryStats s = mg::memory_stats();
  auto held = [&](mg::Category c) { return s.category(c) - start.category(c); };
  return {held(mg::Category::Parameter),
          held(mg::Category::Gradient),
          held(mg::Category::OptimizerState),
          activation,
          s.peak_allocated - start.allocated,
          skipped,
          loss.item<double>()};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 64;
  const Mode modes[] = {
      {"float32", mg::kFloat32, false, mg::kFloat16, false},
      {"autocast fp16", mg::kFloat32, true, mg::kFloat16, true},
      {"autocast bf16", mg::kFloat32, true, mg::kBFloat16, false},
      {"storage fp16 + masters + scaler", mg::kFloat16, false, mg::kFloat16, true},
      {"storage bf16 + masters", mg::kBFloat16, false, mg::kFloat16, false},
  };
  const int64_t N = 3 * (W * W + W), a = batch * W * 4;
  std::printf("3 x Linear(%lld, %lld), %lld parameters, batch %lld, Adam; bytes after one step\n\n", (long long)W,
              (long long)W, (long long)N, (long long)batch);
  std::printf("%-32s %10s %10s %10s %12s %11s %8s\n", "mode", "Parameter", "Gradient", "OptState", "Activation",
              "step peak", "skipped");
  Measured r[5];
  for (int i = 0; i < 5; ++i) {
    r[i] = run(modes[i], batch);
    std::printf("%-32s %10lld %10lld %10lld %12lld %11lld %8lld\n", modes[i].name, (long long)r[i].parameter,
                (long long)r[i].gradient, (long long)r[i].optimizer_state, (long long)r[i].activation,
                (long long)r[i].step_peak, (long long)r[i].skipped);
  }
  std::printf(
      "(Activation: held at the end of forward; step peak: all categories, the step taken;\n"
      " skipped: steps the GradScaler skipped on inf before it)\n\n");

  demo::check_bytes(r[0].activation, 3 * a, "float32 Activation");
  demo::check_bytes(r[1].activation, 3 * (a / 2) + 2 * (W * W * 2) + a, "autocast fp16 Activation");
  demo::check_bytes(r[2].activation, r[1].activation, "autocast bf16 Activation (same bytes as fp16)");
  demo::check_bytes(r[3].activation, 3 * (a / 2), "half storage fp16 Activation");
  demo::check_bytes(r[4].activation, r[3].activation, "half storage bf16 Activation");
  for (int i : {0, 1, 2}) {
    demo::check_bytes(r[i].parameter + r[i].gradient + r[i].optimizer_state, 16 * N,
                      std::string(modes[i].name) + ": parameter + gradient + Adam state = 16 bytes/param");
  }
  for (int i : {3, 4}) {
    demo::check_bytes(r[i].parameter, 2 * N, std::string(modes[i].name) + ": half parameters, 2 bytes/param");
    demo::check_bytes(r[i].optimizer_state, 12 * N,
                      std::string(modes[i].name) + ": float32 master + Adam moments, 12 bytes/param");
  }
  demo::check(r[0].skipped == 0 && r[2].skipped == 0 && r[4].skipped == 0, "no step skipped without a scaler");
  bool finite = true;
  for (const Measured& m : r) finite = finite && std::isfinite(m.loss);
  demo::check(finite, "every loss is finite");
  return demo::exit_code();
}
