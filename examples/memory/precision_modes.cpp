// What each precision mode stores, planned for GPT-2 124M on the meta device (the steady-state
// step, AdamW, the `memgrad train|plan --precision` modes):
//
//   fp32           plain.
//   fp16, bf16     autocast: float32 parameters, gradients and AdamW's moments; the matmuls run on
//                  half copies of their inputs and weights, and autograd saves those copies.
//   fp16-storage,  the model stored in half: half parameters, gradients and activations; the
//   bf16-storage   optimizer updates float32 master weights (OptimizerState); fp16 scales the loss.
//
// Checked by hand, per parameter (N of them): fp32 and autocast hold 4 (parameter) + 8 (moments);
// storage holds 2 (parameter) + 4 (master) + 8 (moments). Per GPT layer, in units of s*b*h (the
// block's saved tensors and its output, docs/memory.md): about 128 in fp32, about 64 in storage,
// and under autocast about 150: more than fp32, because the float32 residual stream and softmax
// outputs are saved next to the half copies the matmuls take, plus half weight copies.
//
//   precision_modes [batch] [seq]      default 1 1024 (Korthikanti et al.'s setting)
#include <cstdlib>

#include "ledger.h"

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 1, seq = argc > 2 ? std::atoll(argv[2]) : 1024;
  const auto gpt = mg::train::ModelSpec::gpt_model(mg::nn::GPTConfig::gpt2());
  const double n = 124439808, sbh = double(seq * batch * 768);
  std::printf("GPT-2 124M, batch %lld x %lld, AdamW: the steady-state step planned on meta, for the cpu\n\n",
              (long long)batch, (long long)seq);
  std::printf("%-13s %9s %9s %9s %12s %12s %12s %10s\n", "precision", "param/N", "grad/N", "state/N", "Activation",
              "peak", "reserved", "layer/sbh");
  mg::plan::PlanOptions quick;
  quick.smallest_limit = false;
  double layer[5] = {}, state[5] = {}, param[5] = {};
  int64_t peak[5] = {};
  int i = 0;
  for (const char* name : {"fp32", "fp16", "bf16", "fp16-storage", "bf16-storage"}) {
    mg::train::StepOptions step;
    step.precision = mg::train::parse_precision(name);
    step.grad_scaler = name[1] == 'p' && name[2] == '1';  // the fp16 modes
    const mg::plan::StepReport r = mg::plan::plan(gpt, {batch, seq}, step, mg::train::Policy::none(), quick);
    // Per parameter: the peak of each category in the step (the gradients are whole at the end of backward).
    param[i] = double(r.peak_of(mg::Category::Parameter)) / n;
    state[i] = double(r.peak_of(mg::Category::OptimizerState)) / n;
    layer[i] = double(mg::plan::measure_block_costs(gpt, {batch, seq}, step).held_bytes) / sbh;
    peak[i] = r.peak;
    std::printf("%-13s %9.3f %9.3f %9.3f %12s %12s %12s %10.2f\n", name, param[i],
                double(r.peak_of(mg::Category::Gradient)) / n, state[i],
                mg::format_bytes(r.category(mg::Category::Activation)).c_str(), mg::format_bytes(r.peak).c_str(),
                mg::format_bytes(r.reserved).c_str(), layer[i]);
    ++i;
  }
  std::printf(
      "(param/N, grad/N, state/N: each category's peak in bytes per parameter; Activation and peak: at the\n"
      " step's peak; reserved: the caching allocator's segments; layer/sbh: one block's saved tensors and\n"
      " output in units of sequence x batch x width)\n\n");
  // Bytes per parameter, to a hundredth: small non-parameter tensors (the causal masks' owners are
  // Other) do not count here, and every parameter tensor is a multiple of 512 B but the biases.
  auto near = [](double v, double want) { return std::abs(v - want) < 0.01; };
  demo::check(near(param[0], 4) && near(param[1], 4) && near(param[3], 2),
              "parameters: 4 B in fp32 and autocast, 2 in storage");
  demo::check(near(state[0], 8) && near(state[1], 8) && near(state[3], 12),
              "optimizer state: AdamW's 8 B, plus the 4 B float32 master in storage");
  demo::check(layer[1] > layer[0], "autocast saves more per layer than fp32 (" + std::to_string(layer[1]) + " > " +
                                       std::to_string(layer[0]) + " sbh)");
  demo::check(layer[3] < layer[0] / 2 + 0.1,
              "storage saves half of fp32 per layer (" + std::to_string(layer[3]) + " sbh)");
  demo::check(peak[1] > peak[0], "the autocast step peaks higher than fp32");
  demo::check(layer[1] == layer[2] && layer[3] == layer[4], "fp16 and bf16 store the same bytes");
  return demo::exit_code();
}
