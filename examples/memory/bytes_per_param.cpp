// Bytes per parameter held between steps, per optimizer and precision, read from the ledger after
// one step of a 256 x 256 weight (65,536 parameters; every buffer a multiple of 512 B, so the
// ledger's rounding adds nothing).
//
//   fp32                parameter 4, gradient 4, state: SGD none, momentum 4, Adam/AdamW 8 (two moments).
//   fp16/bf16 + masters model.to(half) keeps half parameters (2) and half gradients (2); the optimizer
//                       updates float32 MasterWeights, which count as OptimizerState (4) next to the
//                       optimizer's own float32 state. MasterWeights::step has the optimizer read the
//                       half gradients (widened as it goes): no float32 gradient exists even during the
//                       step (the last column; grads_to_masters would add 4 there).
//   bf16, no masters    the optimizer updates the bfloat16 parameters directly; its state is bfloat16 too.
//
// ZeRO (Rajbhandari et al. 2020) counts mixed-precision Adam as 2 + 2 + K with K = 12 (master,
// momentum, variance in float32): 16 bytes per parameter, the same as plain float32 Adam.
//
//   bytes_per_param      (no arguments)
#include <memory>
#include <string>

#include "ledger.h"

namespace {

constexpr int64_t kN = 256 * 256;

enum class Opt { SGD, Momentum, Adam, AdamW };
const char* name(Opt o) {
  switch (o) {
    case Opt::SGD:
      return "SGD";
    case Opt::Momentum:
      return "SGD + momentum";
    case Opt::Adam:
      return "Adam";
    case Opt::AdamW:
      return "AdamW";
  }
  return "";
}
std::unique_ptr<mg::optim::Optimizer> make(Opt o, const mg::nn::NamedTensors& params) {
  switch (o) {
    case Opt::SGD:
      return std::make_unique<mg::optim::SGD>(params, mg::optim::SGDOptions(1e-2));
    case Opt::Momentum:
      return std::make_unique<mg::optim::SGD>(params, mg::optim::SGDOptions(1e-2).momentum(0.9));
    case Opt::Adam:
      return std::make_unique<mg::optim::Adam>(params);
    case Opt::AdamW:
      return std::make_unique<mg::optim::AdamW>(params);
  }
  return nullptr;
}

struct PerParam {
  int64_t parameter, gradient, state, total, gradient_in_step;
};

// One step; bytes per parameter held afterwards, and the Gradient peak during the step.
PerParam measure(Opt o, mg::DType storage, bool masters_on) {
  mg::manual_seed(0);
  const mg::MemoryStats start = mg::memory_stats();
  mg::nn::Linear fc(256, 256, /*bias=*/false);
  fc.to(storage);
  std::unique_ptr<mg::amp::MasterWeights> masters;
  if (masters_on) masters = std::make_unique<mg::amp::MasterWeights>(fc.named_parameters());
  auto opt = make(o, masters_on ? masters->named_parameters() : fc.named_parameters());
  mg::Tensor x;
  {
    mg::MemoryScope scope(mg::Category::Input);
    x = mg::randn({8, 256}).to(storage);
  }
  fc(x).to(mg::kFloat32).pow(2.0).mean().backward();
  mg::reset_peak();
  if (masters_on) {
    masters->use_model_grads();  // each master's gradient is its half gradient: no float32 copy
    masters->step(*opt);         // the optimizer reads them widened; then half(master) -> parameter
  } else {
    opt->step();
  }
  const mg::MemoryStats s = mg::memory_stats();
  auto per = [&](mg::Category c) { return (s.category(c) - start.category(c)) / kN; };
  PerParam r{per(mg::Category::Parameter), per(mg::Category::Gradient), per(mg::Category::OptimizerState), 0,
             (s.peak(mg::Category::Gradient) - start.category(mg::Category::Gradient)) / kN};
  r.total = r.parameter + r.gradient + r.state;
  return r;
}

}  // namespace

int main() {
  struct Precision {
    const char* name;
    mg::DType storage;
    bool masters;
  };
  const Precision precisions[] = {{"fp32", mg::kFloat32, false},
                                  {"fp16 + fp32 masters", mg::kFloat16, true},
                                  {"bf16 + fp32 masters", mg::kBFloat16, true},
                                  {"bf16, no masters", mg::kBFloat16, false}};
  // Expected bytes per parameter: {parameter, gradient, optimizer state} by hand.
  auto expected = [](Opt o, const Precision& p) {
    const int64_t s = p.storage == mg::kFloat32 ? 4 : 2;  // the model's dtype
    const int64_t state_dtype = p.masters ? 4 : s;        // the optimizer's state dtype
    const int64_t moments = o == Opt::SGD ? 0 : o == Opt::Momentum ? 1 : 2;
    return PerParam{s, s, (p.masters ? 4 : 0) + moments * state_dtype, 0, s};  // masters read the half gradients
  };
  std::printf("bytes per parameter after one step (ledger / %lld parameters)\n\n", (long long)kN);
  std::printf("%-16s %-20s %9s %8s %9s %6s %18s\n", "optimizer", "precision", "parameter", "gradient", "opt state",
              "total", "gradient in step");
  for (Opt o : {Opt::SGD, Opt::Momentum, Opt::Adam, Opt::AdamW}) {
    for (const Precision& p : precisions) {
      PerParam r = measure(o, p.storage, p.masters), e = expected(o, p);
      std::printf("%-16s %-20s %9lld %8lld %9lld %6lld %18lld\n", name(o), p.name, (long long)r.parameter,
                  (long long)r.gradient, (long long)r.state, (long long)r.total, (long long)r.gradient_in_step);
      if (r.parameter != e.parameter || r.gradient != e.gradient || r.state != e.state ||
          r.gradient_in_step != e.gradient_in_step)
        demo::check(false, std::string(name(o)) + ", " + p.name + ": differs from the hand arithmetic");
    }
  }
  std::printf("\nZeRO (Rajbhandari et al. 2020), mixed-precision Adam: 2 + 2 + 12 = 16\n\n");
  demo::check(demo::failures() == 0,
              "every row equals the hand arithmetic (4/2-byte params and grads, "
              "4-byte masters, one state tensor per moment)");
  demo::check(measure(Opt::Adam, mg::kFloat16, true).total == 16, "mixed-precision Adam: 16 bytes, as ZeRO counts");
  return demo::exit_code();
}
