// The optimizer side of a training step in a precision mode: the optimizer kind, the precision
// (fp32, autocast, half storage with float32 masters), gradient accumulation, clipping, loss scaling
// and data parallelism (StepOptions), and the Trainer that runs a step with them.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <memgrad/amp/grad_scaler.h>
#include <memgrad/amp/master_weights.h>
#include <memgrad/distributed/data_parallel.h>
#include <memgrad/nn/module.h>
#include <memgrad/optim/in_backward.h>
#include <memgrad/optim/optimizer.h>
#include <memgrad/optim/registry.h>

namespace mg::train {

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
  // The optimizer (optim/registry.h) with the planner's hyperparameters, which do not change any
  // byte; OptimizerSpec::none() for no optimizer.
  optim::OptimizerSpec optimizer{};
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
  // plan::plan() simulates that rank on meta (no processes needed); world_size 1 with stage 0 is no data
  // parallelism at all.
  int64_t world_size = 1, rank = 0;
  int zero_stage = 0;
  int64_t bucket_bytes = int64_t(25) << 20;
  // ZeRO stage 3 (distributed::ParameterUnits): the module paths whose parameters form a unit each
  // (a ChainModel's blocks, ChainModel::unit_names(), which plan::program() and the memgrad command fill
  // in), and whether the next unit is gathered while one runs. offload_params: the parameters,
  // their gradients and optimizer state live in host memory and visit the device unit by unit,
  // stage 3's schedule at any world size (zero_stage must be 0 or 3); the optimizer steps on the host.
  std::vector<std::string> units{};
  bool unit_prefetch = true;
  bool offload_params = false;
  bool data_parallel() const { return world_size > 1 || zero_stage > 0 || offload_params; }
  int sharding_stage() const { return offload_params ? 3 : zero_stage; }  // the DataParallel's stage
  // Step each parameter inside backward as soon as its gradient is complete, and free that gradient
  // (optim::StepInBackward): the gradients' peak falls to about the largest one. Clipping and the
  // GradScaler need every gradient before the first step: with one micro-batch, forward and backward
  // then run twice (the same random numbers), the first backward reducing each gradient to its
  // squared norm and inf/NaN check, the second stepping with the factors that gives, so the results
  // equal the ordinary step's bit for bit, for one more forward and backward's time and no more
  // memory than one pass. forward(g) must then give the same micro-batch when called again for the
  // same g (the ChainModel train_step draws each micro-batch from its `batch` function once). With accumulation the
  // earlier micro-batches accumulate; the last steps inside its backward, or with clipping or the scaler after it as
  // usual (every gradient is held through accumulation anyway). Not with data parallelism. A step that fails inside
  // backward (out of memory) leaves the parameters stepped before the failure updated.
  bool step_in_backward = false;
};

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
  // slices with data parallelism); by default optim::make_optimizer(options.optimizer, ...).
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
  // Its hooks with options.step_in_backward, else null.
  optim::StepInBackward* in_backward() const;
  struct InBackward;  // the hooks and the step's factors (train/trainer.cpp)

 private:
  nn::Module& model_;
  StepOptions options_;
  std::unique_ptr<distributed::ProcessGroup> own_group_;
  std::unique_ptr<distributed::DataParallel> dp_;
  std::optional<amp::MasterWeights> masters_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::optional<amp::GradScaler> scaler_;
  std::unique_ptr<InBackward> in_backward_;
};
// Philox counters reserved for each micro-batch of a training step (see Trainer).
inline constexpr uint64_t kMicroBatchCounters = uint64_t(1) << 40;

}  // namespace mg::train
