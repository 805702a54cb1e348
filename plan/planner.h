// The memory planner: runs one training step (forward, backward, optimizer step) on the meta
// device, where the ledger fills exactly as a real run would but no bytes exist, and reports the
// peak, its breakdown and the FLOPs spent recomputing checkpoint segments. On top of it: three
// ways to choose checkpoint segments for a memory budget (sqrt(n) segments, Chen et al. 2016's
// greedy, and an exact dynamic programme), and the largest batch that fits a budget.
//
// A model is a chain of n identical-interface blocks between a head and a tail: an MLP of n
// Linear+ReLU layers (mse loss against zeros), or a GPT (embeddings, n Blocks, ln_f + tied head).
// By default the planned step is the FIRST step: optimizer state is created lazily during it, so
// its bytes appear at the step's end; StepOptions::steps = 2 plans the steady state instead
// (later steps hold that state from the start and may peak higher).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <memgrad/amp/grad_scaler.h>
#include <memgrad/core/memory.h>
#include <memgrad/distributed/data_parallel.h>
#include <memgrad/nn/gpt.h>

namespace mg::plan {

struct Segment {
  int64_t begin = 0, end = 0;  // blocks [begin, end) run as one recompute-on-backward segment
};

// Which blocks run as checkpoint segments; blocks in no segment keep their activations.
// `selective` (blocks in no segment): GPT checkpoints only the attention core (softmax(mask(q
// k^T / sqrt(d))) -> dropout -> @ v, as Korthikanti et al. 2022); an MLP block runs as a segment
// with CheckpointPolicy::keep_matmuls.
struct Policy {
  std::string name = "none";
  std::vector<Segment> segments;
  bool selective = false;

  static Policy none();
  static Policy every_block(int64_t n);
  static Policy uniform(int64_t n, int64_t k);  // k segments of near-equal length, all checkpointed
  static Policy sqrt_n(int64_t n);              // uniform(n, round(sqrt(n)))
  static Policy selective_only();
  int64_t recomputed_blocks() const;
  std::string str() const;  // "[0,4) [4,8)" or "-"
};

struct ModelSpec {
  enum class Kind { MLP, GPT } kind = Kind::MLP;
  int64_t mlp_layers = 0, mlp_width = 0;
  nn::GPTConfig gpt;
  static ModelSpec mlp(int64_t layers, int64_t width);
  static ModelSpec gpt_model(const nn::GPTConfig& config);  // config.options' device is ignored
  int64_t num_blocks() const { return kind == Kind::MLP ? mlp_layers : gpt.n_layer; }
};

// MLP: x [batch, width]; GPT: token ids [batch, seq_len].
struct InputShape {
  int64_t batch = 1, seq_len = 1;
};

// The model of `spec` on one device, run as a chain: a head (GPT: embeddings), n blocks, and a
// tail that returns the loss (MLP: mse; GPT: ln_f, tied lm head, next-token cross-entropy).
// loss() runs the blocks as `policy` says. plan() runs exactly this code on meta, so a training
// loop built on it (the memgrad command) peaks where the planner predicts.
class ChainModel {
 public:
  ChainModel(const ModelSpec& spec, const Device& device);
  const ModelSpec& spec() const { return spec_; }
  nn::Module& module() const { return *module_; }
  // input and target: MLP [batch, width] float32; GPT int64 token ids [batch, seq_len].
  Tensor loss(const Tensor& input, const Tensor& target, const Policy& policy) const;
  // The pieces loss() chains: the first block's input, block i outside any segment (with
  // `selective`, only its recompute-cheap part is checkpointed), and the loss.
  Tensor head(const Tensor& input) const;
  Tensor block(int64_t i, const Tensor& x, bool selective) const;
  Tensor tail(const Tensor& x, const Tensor& target) const;
  // Zero input and target of `shape`, as plan() feeds them.
  std::pair<Tensor, Tensor> zero_inputs(const InputShape& shape) const;

 private:
  Tensor segment(int64_t begin, int64_t end, const Tensor& x) const;
  ModelSpec spec_;
  Device device_;
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<nn::ModuleList<nn::Linear>> mlp_;  // MLP: the layers
  std::shared_ptr<nn::GPT> gpt_;
};

enum class OptimizerKind { None, SGD, SGDMomentum, Adam, AdamW };
enum class Precision { Float32, Float16, BFloat16 };  // half precisions run under amp::AutocastGuard

struct StepOptions {
  OptimizerKind optimizer = OptimizerKind::AdamW;
  Precision precision = Precision::Float32;
  // Steps run_step/plan run; the report is of the last. 1: the first step, whose optimizer state
  // appears only at its end; 2: a steady-state step, holding that state from its start, as every
  // later step does.
  int64_t steps = 1;
  int64_t accum = 1;       // micro-batches per optimizer step (gradient accumulation)
  double clip_norm = 0.0;  // clip_grad_norm_ to this before the update (0: no clipping)
  // Scale the loss with an amp::GradScaler (PyTorch's defaults), as float16 training does. Its
  // skip-on-overflow depends on values, which meta does not have: a plan assumes every step is taken.
  bool grad_scaler = false;
  // Data parallelism (distributed::DataParallel): the step of rank `rank` of `world_size` processes,
  // each running `accum` micro-batches, with ZeRO stage `zero_stage` and buckets of `bucket_bytes`.
  // plan() simulates that rank on meta (no processes needed); world_size 1 with stage 0 is no data
  // parallelism at all.
  int64_t world_size = 1, rank = 0;
  int zero_stage = 0;
  int64_t bucket_bytes = int64_t(25) << 20;
  bool data_parallel() const { return world_size > 1 || zero_stage > 0; }
};

// The dtype autocast runs half-precision ops in for `p` (none for float32).
std::optional<DType> autocast_dtype(Precision p);

// One training step, as plan() runs it on meta and the memgrad command for real: gradients cleared
// (set_to_none), then for each of options.accum micro-batches forward under `policy` (autocast for
// half precision), loss / accum, backward (scaled when `scaler` is given); then unscale, clipping and
// the optimizer step (skipped by the scaler on inf/NaN). `batch(i)` gives micro-batch i; its tensors,
// and the loss, stay alive until the next replaces them. Returns the loss averaged over the
// micro-batches (NaN on meta).
//
// With `dp` (data parallelism; `opt` built over dp->optimizer_parameters()), this process is rank r
// of N and runs the micro-batches g = r * accum + i of the N * accum that one process with accum
// N * accum would run: batch(g), loss / (N * accum), gradients summed across ranks by `dp`. Each
// micro-batch g draws its random numbers (dropout) from the step's generator offset + g * 2^40, and
// the step ends at + N * accum * 2^40, with or without `dp`, so N ranks draw the masks one process
// does (the 64-bit counters last 2^24 micro-batches). The returned loss is the global one, on every rank.
double train_step(const ChainModel& model, optim::Optimizer* opt, amp::GradScaler* scaler,
                  const std::function<std::pair<Tensor, Tensor>(int64_t)>& batch, const Policy& policy,
                  const StepOptions& options, distributed::DataParallel* dp = nullptr);
// Philox counters reserved for each micro-batch of a train_step (see above).
inline constexpr uint64_t kMicroBatchCounters = uint64_t(1) << 40;

// The optimizer plan() and run_step build for `kind` over `params` (null for None).
std::unique_ptr<optim::Optimizer> make_optimizer(OptimizerKind kind, const nn::NamedTensors& params);

// What one step allocated. Every byte figure counts from what was live on the device before the
// model was built, so a run on kCPU and one on kMeta compare directly.
struct StepReport {
  Device device;
  int64_t peak = 0;               // allocated bytes at the step's peak (model + step)
  CategoryBytes at_peak{};        // by category at that moment
  CategoryBytes category_peak{};  // each category's own peak
  std::map<std::string, int64_t> at_peak_by_owner;
  double flops = 0, recompute_flops = 0;
  int64_t category(Category c) const { return at_peak[size_t(c)]; }
  int64_t peak_of(Category c) const { return category_peak[size_t(c)]; }
  std::string str() const;  // peak, categories at the peak, top owners, FLOPs
};

// A model, its inputs and optimizer built once on a device, for running several steps (benchmarks).
class StepRunner {
 public:
  StepRunner(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Device& device);
  ~StepRunner();
  // One step (forward, backward, optimizer step; grads cleared first). Byte figures count from what
  // was live before the runner was built; peaks from a reset_peak at the step's start.
  StepReport step(const Policy& policy);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Builds the model on `device` and runs one step of it under `policy`.
StepReport run_step(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Policy& policy,
                    const Device& device);
// run_step on kMeta: no real memory is touched.
StepReport plan(const ModelSpec& model, const InputShape& input, const StepOptions& step = {},
                const Policy& policy = Policy::none());

// ---- choosing segments

// Per-block costs measured on meta, and the step's cost model. measure_block_costs runs two
// instrumented meta steps (every block kept; all blocks in one segment) and records the peak of each
// phase: a block's forward, its backward (with its recompute, in a segment), the tail, the rest.
// Every phase's peak is a constant plus the bytes the blocks before it hold, so the peak of any
// segmentation follows exactly (predicted_peak == plan(...).peak; tests/plan checks it by brute force
// for MLPs in float32 and GPTs in float32 and bfloat16). Exact only for that step: one micro-batch,
// no loss scaling, and blocks that all hold the same bytes (an MLP under autocast does not: its first
// block also keeps a half copy of the float32 input). Otherwise choose_segments' meta run is the truth.
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
BlockCosts measure_block_costs(const ModelSpec& model, const InputShape& input, const StepOptions& step = {});
// The peak of a step under `policy` (segments only; `selective` is not modelled), from the costs.
int64_t predicted_peak(const BlockCosts& costs, const Policy& policy);
double recompute_flops(const BlockCosts& costs, const Policy& policy);

Policy choose_sqrt_n(const BlockCosts& costs);
// Chen et al. 2016, Alg. 3: greedily closes a segment once its held bytes exceed b; tries every b
// and keeps the one that fits `budget` with the fewest recomputed FLOPs (else the lowest peak).
// As in checkpoint_sequential, the last segment is not recomputed.
Policy choose_chen_greedy(const BlockCosts& costs, int64_t budget);
// Fewest recomputed FLOPs with predicted_peak <= budget, by dynamic programming over the chain
// (each block kept or in a segment; state: the bytes the blocks so far hold). Where the cost model is
// exact (see BlockCosts), this is the fewest-recompute plan whose meta (and CPU) peak fits. If nothing
// fits, every block as a segment.
Policy choose_dp(const BlockCosts& costs, int64_t budget);

struct ChoiceRow {
  std::string method;
  Policy policy;
  int64_t predicted = 0;  // cost model
  int64_t measured = 0;   // meta run of the chosen plan (equal to `predicted` with measured costs;
                          // should it overshoot, Chen and DP re-choose for a budget smaller by the overshoot)
  double recompute_flops = 0;
  bool fits = false;  // measured <= budget
};
std::vector<ChoiceRow> choose_segments(const ModelSpec& model, const InputShape& input, const StepOptions& step,
                                       int64_t budget);
std::string choice_table(const std::vector<ChoiceRow>& rows, int64_t budget);

// The largest batch whose planned peak fits `budget` (doubling, then bisection on meta runs);
// 0 if batch 1 does not fit. `input.batch` is ignored.
int64_t largest_batch(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Policy& policy,
                      int64_t budget, int64_t max_batch = int64_t(1) << 20);

}  // namespace mg::plan
