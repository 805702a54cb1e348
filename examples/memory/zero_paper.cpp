// ZeRO's own numbers (Rajbhandari et al. 2020), reproduced by the planner on meta, one simulated rank
// per line (no processes, no memory): Figure 1 (a 7.5B GPT on 64 data-parallel ranks, stages 0-3)
// and Table 1 (7.5B, 128B and 1T models on 1 to 1024 ranks, stages 1-3, against a 32 GB V100).
// The paper counts model states only, by formula: 16 bytes a parameter for mixed-precision Adam
// (2 half parameters + 2 half gradients + 12 of float32 master, momentum and variance), the parts a
// stage shards divided by N. memgrad gives two exact numbers beside it: the model states its ledger
// holds after a step (the tensors as allocated: rounded to 512 B, slices padded), and the reserved
// peak of a whole step at batch 1 x 128 (activations, gathered units, buckets, the cache included):
// what must fit on the device.
//
//   zero_paper            Figure 1, and Table 1 for the 7.5B model
//   zero_paper --all      Table 1 for the 128B and 1T models too (minutes on 2 cores)
#include <chrono>
#include <cstring>

#include "ledger.h"

namespace {

struct Model {
  const char* name;
  double paper_parameters;  // Ψ as the paper counts it
  int64_t layers, heads, width;
};

mg::train::ModelSpec gpt(const Model& m) {
  mg::nn::GPTConfig c;
  c.n_layer = m.layers, c.n_head = m.heads, c.n_embd = m.width, c.vocab_size = 50257, c.block_size = 128;
  return mg::train::ModelSpec::gpt_model(c);
}

mg::train::StepOptions zero(int stage, int64_t world) {
  mg::train::StepOptions o;
  o.precision = mg::train::Precision::Float16Storage, o.grad_scaler = true;  // the paper's mixed precision
  o.zero_stage = stage, o.world_size = world, o.rank = 0;
  return o;
}

// The paper's model states per device in GB: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N.
double paper_gb(double psi, int stage, int64_t n) {
  return mg::plan::zero_bytes_per_parameter(2, 2, 12, stage, n) * psi / 1e9;
}

struct Cell {
  double states_gb, reserved_gb;
  int64_t reserved;
};

Cell cell(const Model& m, int stage, int64_t n) {
  const mg::train::InputShape shape{1, 128};
  const mg::plan::ModelStates s = mg::plan::model_states(gpt(m), {1, 1}, zero(stage, n), true);
  const mg::plan::StepReport r = mg::plan::plan(gpt(m), shape, zero(stage, n));
  return {double(s.total()) / 1e9, double(r.smallest_limit) / 1e9, r.smallest_limit};
}

}  // namespace

int main(int argc, char** argv) {
  const bool all = argc > 1 && std::strcmp(argv[1], "--all") == 0;
  const int64_t v100 = int64_t(32) << 30;  // a 32 GB V100: 32 GiB
  const Model models[] = {
      {"7.5B", 7.5e9, 36, 32, 4096}, {"128B", 128e9, 100, 80, 10240}, {"1T", 1e12, 128, 160, 25600}};

  std::printf("Figure 1: %s GPT (%lld layers x %lld, vocab 50257: %lld parameters), fp16 with float32 masters,\n",
              models[0].name, static_cast<long long>(models[0].layers), static_cast<long long>(models[0].width),
              static_cast<long long>(mg::train::ChainModel(gpt(models[0]), mg::kMeta).module().num_parameters()));
  std::printf("AdamW, 64 ranks, batch 1 x 128; rank 0 planned on meta (GB = 10^9 B):\n\n");
  std::printf("%-6s %14s %16s %20s %14s\n", "stage", "paper (states)", "memgrad states", "memgrad reserved peak",
              "planned in");
  for (int stage = 0; stage <= 3; ++stage) {
    const auto t0 = std::chrono::steady_clock::now();
    const Cell c = cell(models[0], stage, 64);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-6d %11.1f GB %13.2f GB %17.2f GB %12.1f s\n", stage, paper_gb(models[0].paper_parameters, stage, 64),
                c.states_gb, c.reserved_gb, s);
    demo::check(c.reserved_gb <= paper_gb(models[0].paper_parameters, stage, 64) + 4.5,
                "stage " + std::to_string(stage) + ": the reserved peak is within the paper's model states + 4.5 GB");
  }

  std::printf("\nTable 1: model states per device (paper | memgrad's ledger) and memgrad's reserved peak of a\n");
  std::printf("step at batch 1 x 128, in GB; * fits a 32 GB V100 (32 GiB: 34.36 GB) by the reserved peak:\n");
  for (const Model& m : models) {
    if (!all && &m != &models[0]) continue;
    std::printf("\n%s (%lld x %lld)  %28s %28s %28s\n", m.name, static_cast<long long>(m.layers),
                static_cast<long long>(m.width), "stage 1 (optimizer states)", "stage 2 (+ gradients)",
                "stage 3 (+ parameters)");
    for (int64_t n : {1, 4, 16, 64, 256, 1024}) {
      std::printf("  N = %-6lld", static_cast<long long>(n));
      for (int stage = 1; stage <= 3; ++stage) {
        const Cell c = cell(m, stage, n);
        char text[64];
        std::snprintf(text, sizeof text, "%.3g | %.3g, %.3g%s", paper_gb(m.paper_parameters, stage, n), c.states_gb,
                      c.reserved_gb, c.reserved <= v100 ? " *" : "");
        std::printf(" %28s", text);
      }
      std::printf("\n");
    }
  }
  return demo::exit_code();
}
