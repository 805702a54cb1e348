// What fits: the largest model of a family under a device budget, planned exactly on meta (the
// reserved peak of a whole step: parameters, gradients, optimizer state, activations, gathered
// units, buckets and the cache), at a ZeRO stage, world size and offload mode. DeepSpeed's estimators
// (estimate_zero3_model_states_mem_needs_all_live and friends) answer the same question with the
// paper's formulas for model states only; largest_by_formula gives that answer beside it.
#pragma once
#include <cstdint>

#include <memgrad/plan/model.h>

namespace mg::plan {

// A family of GPTs grown from `base` by one integer k: Layers (n_layer = k) or Width (n_head = k,
// each head as wide as base's: n_embd = k * base.n_embd / base.n_head).
enum class Family { Layers, Width };
train::ModelSpec scaled(const train::ModelSpec& base, Family family, int64_t k);
// A GPT's parameters, counted from its config (as ChainModel builds it; the lm head tied).
int64_t gpt_parameters(const nn::GPTConfig& c);

struct LargestModel {
  int64_t k = 0;           // 0: not even k = 1 fits
  int64_t parameters = 0;  // of the model at k
  bool capped = false;     // k = max_k fits: the search stopped there
};
// The largest k whose step of `input` with `step` (stage, world size, offload, precision) runs on meta
// under a memory limit of `budget` (doubling, then bisection; each probe one meta run that stops at the
// first allocation past the budget), up to max_k.
LargestModel largest_model(const train::ModelSpec& base, Family family, const train::InputShape& input,
                           const train::StepOptions& step, int64_t budget, int64_t max_k = 4096,
                           const PlanOptions& options = {});
// The same by ZeRO's formula: the largest k whose parameters times the paper's bytes per parameter at
// step's stage and world size (p + g + k, plan::zero_bytes_per_parameter) is within `budget`.
LargestModel largest_by_formula(const train::ModelSpec& base, Family family, const train::StepOptions& step,
                                int64_t budget, int64_t max_k = 1 << 20);

}  // namespace mg::plan
