// ZeRO's accounting (Rajbhandari et al. 2020) against the ledger: the bytes per parameter one rank
// of a data-parallel run holds between steps (ZeRO's "model states": parameters, gradients,
// optimizer state), measured on meta for a world size and stage, next to the paper's formulas. The
// peaks themselves come from plan() with StepOptions::world_size, rank and zero_stage.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <memgrad/distributed/rank_classes.h>
#include <memgrad/plan/planner.h>

namespace mg::plan {

struct ModelStates {
  int64_t parameters = 0;                                    // elements (Ψ)
  int64_t parameter = 0, gradient = 0, optimizer_state = 0;  // one rank's ledger bytes after a step
  int64_t total() const { return parameter + gradient + optimizer_state; }
  double per_parameter(int64_t bytes) const { return parameters ? double(bytes) / double(parameters) : 0.0; }
};
// One rank's model states after two training steps of `model` with `step`'s optimizer, world size,
// rank, ZeRO stage and buckets, on meta. half_parameters: the model stored in float16 and stepped
// through float32 masters (ZeRO's mixed precision); otherwise in float32 (autocast, if `step` asks for
// it, changes only activations).
ModelStates model_states(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                         bool half_parameters);

// The paper's bytes per parameter on one of `world` ranks: parameter `p` + gradient `g` + optimizer
// state `k` bytes per parameter; stage 1 divides k by the world size, stage 2 also g, stage 3 also p.
// Mixed-precision Adam is p = g = 2, k = 12 (float32 master, momentum, variance): 16, 4 + 12/N,
// 2 + 14/N, 16/N.
double zero_bytes_per_parameter(double p, double g, double k, int stage, int64_t world);
// k for an optimizer: its own state (optim::OptimizerEntry::state_bytes: SGD 0, momentum 4, Adam and
// AdamW 8, Lion 4, the 8-bit Adams 2 + 8/256 for the tensors they quantize, Adafactor 0 in the limit:
// its factors grow with rows + columns), plus 4 for float32 masters.
double optimizer_state_bytes_per_parameter(const optim::OptimizerSpec& optimizer, bool masters);

// The classes of ranks of a data-parallel run of `model` at step.world_size and its ZeRO stage (with
// step.offload_params: stage 3's units): ranks whose shares of the parameters have the same sizes, which
// have the same plan (distributed/rank_classes.h). Rank 0's class first.
std::vector<distributed::RankClass> rank_classes(const train::ModelSpec& model, const train::StepOptions& step);

// What `memgrad plan --world-size N --zero S` adds: the planned peak of one rank at each stage under
// `policy`, and the bytes per parameter (ledger against the paper) for float32 and for float16 with masters.
std::string zero_table(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                       const train::Policy& policy);

}  // namespace mg::plan
