// zero_grad(set_to_none = true) against zero_grad(false). Between steps a model either keeps its
// .grad buffers filled with zeros (false: backward then adds into them) or drops them (true, the
// default, as in PyTorch >= 2.0: backward allocates each gradient when it first reaches the
// parameter). Dropping them frees one parameter-sized buffer per parameter for the whole forward
// pass, which is when the activations pile up, so the step's peak drops too.
//
// The model: two Linear(512, 512) with a ReLU, batch 16, Adam; three steps each way.
//
//   zero_grad [width]     default 512
#include <cstdlib>

#include "ledger.h"

namespace {

struct Measured {
  int64_t gradient_after_forward, step_peak, gradient_at_peak;
};

Measured train(bool set_to_none, int64_t width) {
  mg::manual_seed(0);
  mg::nn::Sequential model;
  model.emplace_back<mg::nn::Linear>(width, width);
  model.emplace_back<mg::nn::ReLU>();
  model.emplace_back<mg::nn::Linear>(width, width);
  mg::optim::Adam opt(model.named_parameters());
  mg::Tensor x = mg::randn({16, width}), target = mg::zeros({16, width});
  Measured m{};
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad(set_to_none);
    mg::reset_peak();  // measure the last step only (the earlier ones created Adam's state)
    mg::Tensor loss = mg::mse_loss(model(x), target);
    m.gradient_after_forward = demo::now(mg::Category::Gradient);
    loss.backward();
    opt.step();
    const mg::MemoryStats s = mg::memory_stats();
    m.step_peak = s.peak_allocated;
    m.gradient_at_peak = s.at_peak(mg::Category::Gradient);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t width = argc > 1 ? std::atoll(argv[1]) : 512;
  const int64_t grad_bytes = 4 * 2 * (width * width + width);
  const int64_t before = mg::memory_stats().allocated;
  Measured none = train(true, width), zero = train(false, width);
  std::printf("2 x Linear(%lld, %lld), batch 16, Adam, third step (bytes counted from %lld B held before)\n\n",
              (long long)width, (long long)width, (long long)before);
  std::printf("%-26s %22s %12s %18s\n", "", "Gradient after forward", "step peak", "Gradient at peak");
  std::printf("%-26s %22lld %12lld %18lld\n", "zero_grad(true)  [none]", (long long)none.gradient_after_forward,
              (long long)(none.step_peak - before), (long long)none.gradient_at_peak);
  std::printf("%-26s %22lld %12lld %18lld\n\n", "zero_grad(false) [zeros]", (long long)zero.gradient_after_forward,
              (long long)(zero.step_peak - before), (long long)zero.gradient_at_peak);

  demo::check_bytes(none.gradient_after_forward, 0, "set_to_none: no gradient bytes during forward");
  demo::check_bytes(zero.gradient_after_forward, grad_bytes, "zeroing: every .grad held during forward");
  demo::check(none.step_peak < zero.step_peak,
              "set_to_none lowers the step's peak (by " + std::to_string(zero.step_peak - none.step_peak) + " B)");
  return demo::exit_code();
}
