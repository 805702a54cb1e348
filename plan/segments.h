// Choosing checkpoint segments: per-block costs measured on meta (BlockCosts), the allocated peak
// they predict for a policy, and the choices (sqrt(n), Chen's greedy, a DP) verified by meta runs
// under a budget (choose_segments).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <memgrad/plan/model.h>

namespace mg::plan {

// Per-block costs measured on meta, and the step's cost model. measure_block_costs runs two
// instrumented meta steps of the program's chain (every block kept; all blocks in one segment; each
// after one ordinary step, so the optimizer state exists) and records the peak of each phase: a
// block's forward, its backward (with its recompute, in a segment), the tail, the rest. Every
// phase's peak is a constant plus the bytes the blocks before it hold, so the allocated peak of any
// segmentation follows (predicted_peak == plan(...).peak; tests/plan checks it by brute force). Exact
// only for one micro-batch, no loss scaling, and blocks that all hold the same bytes; reserved bytes
// are not modelled: choose_segments verifies every choice with a meta run under the budget.
struct BlockCosts {
  int64_t n = 0;
  int64_t input_bytes = 0;  // a block's input, which a segment boundary keeps
  int64_t held_bytes = 0;   // bytes a kept block holds (its saved tensors and its output)
  double forward_flops = 0;
  int64_t overhead = 0;  // peak of Policy::none() minus n * held_bytes
  // Bytes held: a kept block adds block_bytes (its saved tensors and output; == held_bytes), a
  // segment adds output_bytes. Each phase's peak beyond what the blocks before it hold:
  int64_t block_bytes = 0, output_bytes = 0;
  int64_t forward_kept = 0, forward_segment = 0;  // a block's forward, kept or in a segment
  std::vector<int64_t> backward_kept;             // block i's backward, beyond blocks < i and itself
  std::vector<int64_t> backward_segment;          // the same in a segment, beyond blocks < its start
  int64_t recompute = 0;                          // a block's recompute, beyond its segment's earlier ones
  int64_t tail = 0, tail_after_segment = 0;       // tail forward + backward (last block kept / in a segment)
  int64_t constant = 0;                           // head, head backward, optimizer step
};
BlockCosts measure_block_costs(const Program& program, const StepContext& ctx, const PlanOptions& options = {});
BlockCosts measure_block_costs(const train::ModelSpec& model, const train::InputShape& input,
                               const train::StepOptions& step = {});
// held_bytes alone (one instrumented step with every block kept, not the segment's): what a block
// holds, for tables that show only that.
int64_t measure_held_bytes(const train::ModelSpec& model, const train::InputShape& input,
                           const train::StepOptions& step = {});
// The allocated peak of a step under `policy` (segments only; `selective` is not modelled).
int64_t predicted_peak(const BlockCosts& costs, const train::Policy& policy);
double recompute_flops(const BlockCosts& costs, const train::Policy& policy);

train::Policy choose_sqrt_n(const BlockCosts& costs);
// Chen et al. 2016, Alg. 3: greedily closes a segment once its held bytes exceed b; tries every b
// and keeps the one whose predicted peak fits `target` with the fewest recomputed FLOPs (else the
// lowest peak). As in checkpoint_sequential, the last segment is not recomputed.
train::Policy choose_chen_greedy(const BlockCosts& costs, int64_t target);
// Fewest recomputed FLOPs with predicted_peak <= target, by dynamic programming over the chain (each
// block kept or in a segment; state: the bytes the blocks so far hold). If nothing fits, every block
// as a segment.
train::Policy choose_dp(const BlockCosts& costs, int64_t target);

struct ChoiceRow {
  std::string method;
  train::Policy policy;
  int64_t predicted = 0;  // the cost model's allocated peak
  StepReport planned;     // the meta run of the policy under the budget (its reserved bytes, or OOM)
  double recompute_flops = 0;
  bool fits = false;  // the steps run under the budget
};
// Each method's plan for the budget, verified by a meta run under a memory limit of `budget`: no
// checkpointing, sqrt(n), Chen's greedy, the DP and every block. Chen and the DP choose for an
// allocated target: the budget itself, else the largest target (by bisection) whose choice runs
// under the budget, since the reserved bytes exceed the allocated ones by what the caching
// allocator's segments leave unused.
std::vector<ChoiceRow> choose_segments(const Program& program, const StepContext& ctx, int64_t budget,
                                       const PlanOptions& options = {});
std::vector<ChoiceRow> choose_segments(const train::ModelSpec& model, const train::InputShape& input,
                                       const train::StepOptions& step, int64_t budget, const PlanOptions& options = {});
// The row that fits with the fewest recomputed FLOPs (then the fewest reserved bytes), if any fits.
std::optional<ChoiceRow> best_fit(const std::vector<ChoiceRow>& rows);
std::string choice_table(const std::vector<ChoiceRow>& rows, int64_t budget);

}  // namespace mg::plan
