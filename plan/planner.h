// The memory planner. A plan runs training steps on the meta device, where the ledger and the
// caching allocator behave exactly as on a real device but no bytes exist, and states two numbers
// for the steady-state step, both to the byte: the allocated peak and the reserved peak (the
// segments the caching allocator holds). A plan is made for a device: meta books the scratch that
// device's kernels allocate (core/device.h: meta_target). Anything compared with a budget (the
// largest batch, automatic checkpointing, out-of-memory advice) asks whether the steps run under a
// memory limit of that size, which is the reserved bytes.
//
// Any program can be planned: a Program builds a model (and optimizer, data, ...) on the device it is
// given and returns one training step. The built-in models (an MLP and a GPT, ModelSpec) are such
// programs. Checkpoint segments are chosen over a chain of blocks that the program runs through
// run_chain (an nn::Sequential, a ModuleList, or any list of blocks).
//
// The steady state: the first step creates the optimizer's state lazily, so later steps start with
// it. The planner runs steps until the allocator's layout after a step repeats an earlier one (from
// then on every step allocates, frees and reuses exactly as before) and reports the last step; the
// reserved peak is the largest over all the steps run, since a memory limit must hold them all.
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

// Which blocks of a chain run as checkpoint segments; blocks in no segment keep their activations.
// `selective` (blocks in no segment): each block checkpoints only its recompute-cheap part (the
// GPT's attention core, as Korthikanti et al. 2022; any other block runs as a segment with
// CheckpointPolicy::keep_matmuls).
struct Policy {
  std::string name = "none";
  std::vector<Segment> segments;
  bool selective = false;

  static Policy none();
  static Policy every_block(int64_t n);
  static Policy uniform(int64_t n, int64_t k);  // k segments of near-equal length, all checkpointed
  static Policy sqrt_n(int64_t n);              // uniform(n, round(sqrt(n)))
  static Policy selective_only();
  // By name, over n blocks: none, sqrt, selective, or every-K (segments of K blocks, 1 <= K <= n), as
  // memgrad train|plan --checkpoint takes them (its "auto" is choose_segments). ValueError otherwise.
  static Policy parse(const std::string& name, int64_t n);
  int64_t recomputed_blocks() const;
  std::string str() const;  // "[0,4) [4,8)" or "-"
};

// ---- chains of blocks

// n blocks run in order. block(i, x, selective) runs block i on x; with `selective`, only its
// recompute-cheap part is checkpointed.
struct Chain {
  int64_t n = 0;
  std::function<Tensor(int64_t, const Tensor&, bool)> block;
};
// n blocks where forward(i, x) runs block i, each under MemoryScope("<i>") (its activations carry the
// block's index as owner); `selective` runs a block as a checkpoint that keeps what its matmuls
// saved. The Sequential and ModuleList forms refer to `blocks`: keep them alive while the chain runs.
Chain chain_of(int64_t n, std::function<Tensor(int64_t, const Tensor&)> forward);
Chain chain_of(const nn::Sequential& blocks);
template <class M>
Chain chain_of(const nn::ModuleList<M>& blocks) {
  const nn::ModuleList<M>* list = &blocks;
  return chain_of(int64_t(blocks.size()), [list](int64_t i, const Tensor& x) { return (*list)[size_t(i)].forward(x); });
}
// Runs x through the chain as `policy` says: each segment as one checkpoint (its blocks' activations
// recomputed in backward), the other blocks kept. Raises ValueError for segments outside the chain.
// While the planner measures block costs (measure_block_costs) it runs the chain its own way here.
Tensor run_chain(const Chain& chain, const Tensor& x, const Policy& policy);

// ---- precision

enum class OptimizerKind { None, SGD, SGDMomentum, Adam, AdamW };
// Float32. Float16 and BFloat16: autocast (float32 parameters, gradients and optimizer state;
// matmuls and convolutions on half copies). Float16Storage and BFloat16Storage: the model stored in
// half (parameters, gradients, activations), the optimizer updating float32 master weights.
enum class Precision { Float32, Float16, BFloat16, Float16Storage, BFloat16Storage };
// The dtype autocast runs half-precision ops in for `p` (none unless p is an autocast mode).
std::optional<DType> autocast_dtype(Precision p);
// The dtype the model is stored in for `p` (none unless p is a storage mode).
std::optional<DType> storage_dtype(Precision p);
// "fp32", "fp16", "bf16", "fp16-storage", "bf16-storage" (what memgrad train|plan --precision take).
const char* precision_name(Precision p);
Precision parse_precision(const std::string& name);  // ValueError for another name

struct StepOptions {
  OptimizerKind optimizer = OptimizerKind::AdamW;
  Precision precision = Precision::Float32;
  int64_t accum = 1;       // micro-batches per optimizer step (gradient accumulation)
  double clip_norm = 0.0;  // clip_grad_norm_ to this before the update (0: no clipping)
  // Scale the loss with an amp::GradScaler (`scaler`: PyTorch's defaults), as float16 training does.
  // Its skip-on-overflow depends on values, which meta does not have: a plan assumes every step is
  // taken. (A skipped first step creates no optimizer state, so a real run differs from the plan
  // until a step is taken.)
  bool grad_scaler = false;
  amp::GradScalerOptions scaler{};
  // Data parallelism (distributed::DataParallel): the step of rank `rank` of `world_size` processes,
  // each running `accum` micro-batches, with ZeRO stage `zero_stage` and buckets of `bucket_bytes`.
  // plan() simulates that rank on meta (no processes needed); world_size 1 with stage 0 is no data
  // parallelism at all.
  int64_t world_size = 1, rank = 0;
  int zero_stage = 0;
  int64_t bucket_bytes = int64_t(25) << 20;
  bool data_parallel() const { return world_size > 1 || zero_stage > 0; }
};

// The optimizer plans build for `kind` over `params` (null for None), with the planner's
// hyperparameters (which do not change any byte).
std::unique_ptr<optim::Optimizer> make_optimizer(OptimizerKind kind, const nn::NamedTensors& params);

// The optimizer side of training in a precision mode, shared by the built-in models, the memgrad
// command and any program that wants it. For a storage mode it converts `model` to half and gives
// the optimizer float32 master weights (amp::MasterWeights); with options.grad_scaler it scales the
// loss. step() runs one training step: gradients cleared (set_to_none), then for each of
// options.accum micro-batches `forward(g)` under autocast (autocast modes), loss / micro-batches and
// backward (scaled); then unscale, clipping and the optimizer step (skipped by the scaler on
// inf/NaN), and the half parameters refreshed from the masters. Returns the loss averaged over the
// micro-batches (NaN on meta). A step that throws (out of memory, say) leaves no trace: gradients
// cleared, the generator rewound, the scaler as it was.
//
// With options.data_parallel() this process is rank r of N (options.rank, options.world_size) of a
// distributed::DataParallel over `group` (by default a simulated one, as plans use on meta; the
// masters of half parameters are then its slices): it runs the micro-batches g = r * accum + i of the
// N * accum that one process with accum N * accum would run, loss / (N * accum), gradients summed
// across ranks. Each micro-batch g draws its random numbers (dropout) from the step's generator
// offset + g * kMicroBatchCounters, and the step ends at + N * accum * kMicroBatchCounters, with or
// without data parallelism, so N ranks draw the masks one process does (the 64-bit counters last
// 2^24 micro-batches). The returned loss is the global one, on every rank.
class Trainer {
 public:
  // make: the optimizer for the parameters it updates (the masters' in a storage mode, the rank's
  // slices with data parallelism); by default make_optimizer(options.optimizer, ...).
  using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(const nn::NamedTensors&)>;
  Trainer(nn::Module& model, const StepOptions& options, const OptimizerFactory& make = {},
          distributed::ProcessGroup* group = nullptr);
  ~Trainer();
  double step(const std::function<Tensor(int64_t micro_batch)>& forward);
  optim::Optimizer* optimizer() const { return opt_.get(); }
  amp::GradScaler* scaler() { return scaler_ ? &*scaler_ : nullptr; }
  amp::MasterWeights* masters() const;
  distributed::DataParallel* data_parallel() const { return dp_.get(); }
  const StepOptions& options() const { return options_; }

 private:
  nn::Module& model_;
  StepOptions options_;
  std::unique_ptr<distributed::ProcessGroup> own_group_;
  std::unique_ptr<distributed::DataParallel> dp_;
  std::optional<amp::MasterWeights> masters_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::optional<amp::GradScaler> scaler_;
};
// Philox counters reserved for each micro-batch of a training step (see Trainer).
inline constexpr uint64_t kMicroBatchCounters = uint64_t(1) << 40;

// ---- programs

// What the planner hands a program: the device to build on, the batch to build for and the policy
// to run its chain of blocks under (run_chain(chain, x, ctx.policy)).
struct StepContext {
  Device device;
  int64_t batch = 1;
  Policy policy;
};
// A training program: builds its model, optimizer and whatever else it keeps on ctx.device, and
// returns one training step (forward, backward, optimizer step), which the planner calls
// repeatedly. Everything the step allocates on the device must be made on ctx.device.
using Step = std::function<void()>;
using Program = std::function<Step(const StepContext&)>;

// What a plan is made for and how far it runs.
struct PlanOptions {
  DeviceType device = DeviceType::CPU;  // the device whose kernels' scratch meta books (cpu or cuda)
  int64_t memory_limit = 0;             // run the steps under this cap on reserved bytes (0: none)
  int64_t max_steps = 12;               // steps at most while looking for the steady state
  int64_t steps = 0;                    // 0: until the allocator repeats itself; k: exactly k steps
  bool smallest_limit = true;           // search for the smallest memory limit the steps run under
};

// The allocation granule: requests, segments and therefore reserved bytes are multiples of it.
inline constexpr int64_t kGranule = 512;

// What the steps allocated. Byte figures count from a fresh allocator (plans and measure()) or from
// what was live before the program was built (StepRunner).
struct StepReport {
  Device device;                        // where the steps ran
  DeviceType target = DeviceType::CPU;  // the device the plan is for (meta), else device's type
  int64_t peak = 0;                     // allocated bytes at the last step's peak
  int64_t reserved = 0;                 // reserved bytes: the peak over all the steps run
  int64_t first_peak = 0;               // allocated bytes at the first step's peak
  // The smallest memory limit the steps run under: a limit kGranule bytes lower throws
  // OutOfMemoryError (found by bisection on meta runs; 0 when not searched). With no limit the cache
  // grows to `reserved`, which is at least this.
  int64_t smallest_limit = 0;
  // The step that runs out of memory under smallest_limit - kGranule (0: building the program).
  int64_t below_limit_fails_at = -1;
  int64_t steps = 0;    // steps run (with out_of_memory: the one that failed, 0 while building); breakdown of the last
  bool steady = false;  // the allocator's layout repeated: every later step allocates as the last
  bool out_of_memory = false;     // the steps did not run under PlanOptions::memory_limit
  std::string oom_message;        // the OutOfMemoryError's message
  CategoryBytes at_peak{};        // by category at the last step's peak
  CategoryBytes category_peak{};  // each category's own peak in the last step
  std::map<std::string, int64_t> at_peak_by_owner;
  // With out_of_memory: the error's fragmentation forensics (why the cache could not serve it).
  std::shared_ptr<const Fragmentation> oom_fragmentation;
  double flops = 0, recompute_flops = 0;  // in the last step
  int64_t category(Category c) const { return at_peak[size_t(c)]; }
  int64_t peak_of(Category c) const { return category_peak[size_t(c)]; }
  bool fits(int64_t budget) const;  // the steps ran, and their reserved peak is within budget
  std::string str() const;          // peaks, categories at the peak, top owners, FLOPs
};

// Runs `program` on kMeta for options.device, in a fresh allocator (IsolatedAllocator) under
// options.memory_limit, and reports it. An OutOfMemoryError under the limit is reported, not thrown.
StepReport plan(const Program& program, const StepContext& ctx, const PlanOptions& options = {});
// The same steps on a real device in a fresh allocator of its own, measured: what plan() predicts.
StepReport measure(const Program& program, const StepContext& ctx, const PlanOptions& options = {});
// Whether the steps run on meta under a memory limit of `budget` (every step, to the steady state).
bool fits(const Program& program, const StepContext& ctx, int64_t budget, const PlanOptions& options = {});

// Bytes a device uses outside memgrad's allocator, which no plan counts: the CUDA context, and the
// cuBLAS and cuDNN handles and their workspaces. bytes < 0: not known without the device (on one,
// cuda::device_memory().outside_memgrad measures them all).
struct OutsideBytes {
  std::string what;
  int64_t bytes = -1;
};
std::vector<OutsideBytes> outside_allocator(DeviceType device);

// ---- the built-in models

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

// The model of `spec` on one device, run as a chain: a head (GPT: embeddings), n blocks, and a tail
// that returns the loss (MLP: mse against the target; GPT: ln_f, tied lm head, next-token
// cross-entropy). In a storage precision the model is converted to half (module().to(dtype)); the
// MLP's head casts its float32 input to the model's dtype.
class ChainModel {
 public:
  ChainModel(const ModelSpec& spec, const Device& device);
  const ModelSpec& spec() const { return spec_; }
  nn::Module& module() const { return *module_; }
  const Chain& chain() const { return chain_; }
  // input and target: MLP [batch, width] float32; GPT int64 token ids [batch, seq_len].
  Tensor loss(const Tensor& input, const Tensor& target, const Policy& policy) const;
  Tensor head(const Tensor& input) const;
  Tensor tail(const Tensor& x, const Tensor& target) const;
  // A fresh zero input and target of `shape` (what a plan feeds each micro-batch).
  std::pair<Tensor, Tensor> zero_inputs(const InputShape& shape) const;

 private:
  ModelSpec spec_;
  Device device_;
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<nn::ModuleList<nn::Linear>> mlp_;  // MLP: the layers
  std::shared_ptr<nn::GPT> gpt_;
  Chain chain_;
};

// One training step of a ChainModel, as plan() runs it on meta and the memgrad command for real:
// trainer.step over `batch(i)`, run under `policy`. Micro-batch i's input and target stay alive
// until the next replaces them (as in a Python loop).
double train_step(const ChainModel& model, Trainer& trainer,
                  const std::function<std::pair<Tensor, Tensor>(int64_t)>& batch, const Policy& policy);
// The same with the pieces held by the caller: `opt` (over dp->optimizer_parameters() with `dp`),
// `scaler` (may be null) and `dp` (may be null; its masters for half parameters), as Trainer::step.
double train_step(const ChainModel& model, optim::Optimizer* opt, amp::GradScaler* scaler,
                  const std::function<std::pair<Tensor, Tensor>(int64_t)>& batch, const Policy& policy,
                  const StepOptions& options, distributed::DataParallel* dp = nullptr);

// The built-in model as a program: a ChainModel and a Trainer built on ctx.device, a fresh zero
// input and target per micro-batch of ctx.batch rows (and input.seq_len positions).
Program program(const ModelSpec& model, const InputShape& input, const StepOptions& step);
StepContext context(const InputShape& input, const Policy& policy = Policy::none());

// plan(program(model, input, step), context(input, policy), options).
StepReport plan(const ModelSpec& model, const InputShape& input, const StepOptions& step = {},
                const Policy& policy = Policy::none(), const PlanOptions& options = {});
// measure(...) of the same on `device` (its own fresh allocator, no limit).
StepReport run_step(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Policy& policy,
                    const Device& device);

// A built-in model, its inputs and trainer built once on a device, for running several steps
// (benchmarks) in the device's own allocator. Byte figures count from what was live before the
// runner was built; peaks from a reset_peak at each step's start.
class StepRunner {
 public:
  StepRunner(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Device& device);
  ~StepRunner();
  StepReport step(const Policy& policy);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- choosing segments

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
BlockCosts measure_block_costs(const ModelSpec& model, const InputShape& input, const StepOptions& step = {});
// The allocated peak of a step under `policy` (segments only; `selective` is not modelled).
int64_t predicted_peak(const BlockCosts& costs, const Policy& policy);
double recompute_flops(const BlockCosts& costs, const Policy& policy);

Policy choose_sqrt_n(const BlockCosts& costs);
// Chen et al. 2016, Alg. 3: greedily closes a segment once its held bytes exceed b; tries every b
// and keeps the one whose predicted peak fits `target` with the fewest recomputed FLOPs (else the
// lowest peak). As in checkpoint_sequential, the last segment is not recomputed.
Policy choose_chen_greedy(const BlockCosts& costs, int64_t target);
// Fewest recomputed FLOPs with predicted_peak <= target, by dynamic programming over the chain (each
// block kept or in a segment; state: the bytes the blocks so far hold). If nothing fits, every block
// as a segment.
Policy choose_dp(const BlockCosts& costs, int64_t target);

struct ChoiceRow {
  std::string method;
  Policy policy;
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
std::vector<ChoiceRow> choose_segments(const ModelSpec& model, const InputShape& input, const StepOptions& step,
                                       int64_t budget, const PlanOptions& options = {});
// The row that fits with the fewest recomputed FLOPs (then the fewest reserved bytes), if any fits.
std::optional<ChoiceRow> best_fit(const std::vector<ChoiceRow>& rows);
std::string choice_table(const std::vector<ChoiceRow>& rows, int64_t budget);

// A batch whose steps run on meta under a memory limit of `budget`, to the steady state, while
// batch + 1's do not (doubling, then bisection); 0 if batch 1 does not. It is the largest when the
// peak grows with the batch; segment rounding can break that, so a larger batch may fit after a gap
// the search does not look past. ctx.batch is ignored.
int64_t largest_batch(const Program& program, const StepContext& ctx, int64_t budget, const PlanOptions& options = {},
                      int64_t max_batch = int64_t(1) << 20);
int64_t largest_batch(const ModelSpec& model, const InputShape& input, const StepOptions& step, const Policy& policy,
                      int64_t budget, const PlanOptions& options = {}, int64_t max_batch = int64_t(1) << 20);

}  // namespace mg::plan
