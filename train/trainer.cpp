// Precision modes and the training step (Trainer): the code a plan runs on meta and the memgrad
// command runs for real.
#include <memgrad/train/trainer.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <memgrad/core/autocast.h>
#include <memgrad/core/error.h>
#include <memgrad/core/host_memory.h>
#include <memgrad/core/random.h>
#include <memgrad/nn/deferred.h>
#include <memgrad/ops/ops.h>
#include <memgrad/optim/clip.h>
#include <memgrad/train/step_impl.h>

namespace mg::train {

// ---- precision

std::optional<DType> autocast_dtype(Precision p) {
  if (p == Precision::Float16) return kFloat16;
  if (p == Precision::BFloat16) return kBFloat16;
  return std::nullopt;
}
std::optional<DType> storage_dtype(Precision p) {
  if (p == Precision::Float16Storage) return kFloat16;
  if (p == Precision::BFloat16Storage) return kBFloat16;
  return std::nullopt;
}

namespace {
const std::pair<Precision, const char*> kPrecisionNames[] = {{Precision::Float32, "fp32"},
                                                             {Precision::Float16, "fp16"},
                                                             {Precision::BFloat16, "bf16"},
                                                             {Precision::Float16Storage, "fp16-storage"},
                                                             {Precision::BFloat16Storage, "bf16-storage"}};
}  // namespace
const char* precision_name(Precision p) {
  for (auto& [q, name] : kPrecisionNames)
    if (q == p) return name;
  return "?";
}
Precision parse_precision(const std::string& name) {
  for (auto& [q, n] : kPrecisionNames)
    if (name == n) return q;
  throw ValueError("train: expected a precision fp32, fp16, bf16, fp16-storage or bf16-storage, got '" + name + "'");
}

// ---- the training step

// The Trainer's step inside backward: the hooks, and this step's factors for the gradients they step
// (the unscaling of half gradients into their masters, the clipping coefficient).
struct Trainer::InBackward {
  std::unique_ptr<optim::StepInBackward> hooks;
  double inv_scale = 1, coef = 1;

  // The last micro-batch's backward of `scaled` (the loss, scaled when there is a scaler): steps
  // inside it and returns true, or only accumulates and returns false (the caller steps after it).
  // `again` runs the micro-batch's forward again (same random numbers) and returns its scaled loss.
  bool backward(Tensor scaled, const std::function<Tensor()>& again, amp::GradScaler* scaler,
                amp::MasterWeights* masters, const StepOptions& options) {
    using Mode = optim::StepInBackward::Mode;
    const bool clip = options.clip_norm > 0;
    if (!scaler && !clip) {  // nothing needs every gradient first
      hooks->set_mode(Mode::Step);
      scaled.backward();
      return true;
    }
    if (options.accum > 1) {  // every gradient is held through accumulation: step after backward
      hooks->set_mode(Mode::Accumulate);
      scaled.backward();
      return false;
    }
    // Pass 1: each gradient (unscaled, into its master for half parameters) reduced to its part of
    // the norm and whether it is finite, as unscale_ and clip_grad_norm_ see it, then freed.
    optim::GradNormClipper clipper(clip ? options.clip_norm : 1.0);
    bool found = false;
    hooks->set_mode(Mode::Measure, [&](size_t i, const Tensor& leaf) {
      Tensor g = leaf.grad();
      if (masters) {
        if (scaler) found |= amp::any_non_finite({g});
        masters->grad_to_master(i, scaler ? scaler->inverse_scale() : 1.0);
        g = masters->parameters()[i].grad();
        masters->parameters()[i].set_grad(Tensor());
      } else if (scaler) {
        found |= scaler->unscale_grad_(g);
      }
      if (clip) clipper.add(i, g);
    });
    scaled.backward();
    // The first graph goes before the second forward: its gradient accumulators, older than every
    // node of the second, would otherwise be reused and run last, holding every gradient till the end.
    scaled = Tensor();
    if (scaler && !scaler->record_unscaled(found)) return true;  // skipped, as GradScaler::step skips
    // Pass 2: the forward again and the same gradients, scaled by the factors now known, each stepped
    // and freed. (Not a second backward through a retained graph: that would keep every saved tensor
    // alive through the first, above the peak of an ordinary backward.)
    inv_scale = masters && scaler ? scaler->inverse_scale() : 1.0;
    coef = clip ? clipper.coefficient(clipper.partial()) : 1.0;
    optim::StepInBackward::Visit before;
    if (!masters)  // (half parameters: their step unscales into the master and clips there)
      before = [this, scaler](size_t, const Tensor& leaf) {
        if (scaler) scaler->unscale_grad_(leaf.grad());
        optim::GradNormClipper::clip(leaf.grad(), coef);
      };
    hooks->set_mode(Mode::Step, before);
    again().backward();
    inv_scale = coef = 1;
    return true;
  }
};

namespace detail {

double run_step(nn::Module& model, optim::Optimizer* opt, amp::GradScaler* scaler, amp::MasterWeights* masters,
                const std::function<Tensor(int64_t)>& forward, const StepOptions& options,
                distributed::DataParallel* dp, Trainer::InBackward* in_backward) {
  MG_CHECK(options.accum >= 1, ValueError, "train::train_step: expected accum >= 1, got ", options.accum);
  MG_CHECK(!options.step_in_backward || in_backward, ValueError,
           "train::train_step: step_in_backward needs a train::Trainer (its hooks), got the step's pieces");
  model.zero_grad();
  // A step that fails (out of memory, say) leaves no trace, so that it can be retried or run
  // smaller: gradients cleared again, the generator rewound, the scaler as it was. The optimizer's
  // step is all-or-nothing itself, and it is the last thing that changes a parameter.
  const std::optional<amp::GradScaler> scaler_before = scaler ? std::optional(*scaler) : std::nullopt;
  // The phases, marked in the memory history when it records (the timeline page draws them).
  const auto phase = [&model](const char* name) {
    if (!recording_history()) return;
    const std::vector<Tensor> params = model.parameters();
    if (!params.empty()) annotate_memory(name, params[0].device());
  };
  Generator& rng = default_generator();
  const uint64_t step_offset = rng.offset();
  try {
    if (dp) dp->zero_grad();
    const std::optional<DType> half = autocast_dtype(options.precision);
    const int64_t first = dp ? dp->rank() * options.accum : 0;                  // this rank's first micro-batch
    const int64_t micro_batches = options.accum * (dp ? dp->world_size() : 1);  // in the whole step
    double total = 0;
    bool stepped = false;  // inside backward
    Tensor loss;           // live until the next micro-batch replaces it, as in a Python loop
    for (int64_t i = 0; i < options.accum; ++i) {
      const int64_t g = first + i;
      const uint64_t start = step_offset + uint64_t(g) * kMicroBatchCounters;
      auto run_forward = [&] {  // from the micro-batch's first random number
        rng.set_offset(start);
        if (dp) dp->prepare_forward();
        std::optional<amp::AutocastGuard> autocast;
        if (half) autocast.emplace(*half);
        Tensor l = forward(g);
        return micro_batches > 1 ? l * (1.0 / double(micro_batches)) : l;
      };
      phase("forward");
      loss = run_forward();
      total += loss.is_meta() ? std::numeric_limits<double>::quiet_NaN() : loss.item<double>();
      phase("backward");
      if (dp) dp->prepare_backward(i + 1 == options.accum);
      Tensor scaled = scaler ? scaler->scale(loss) : loss;
      if (!in_backward) {
        scaled.backward();
      } else if (i + 1 < options.accum) {
        in_backward->hooks->set_mode(optim::StepInBackward::Mode::Accumulate);
        scaled.backward();
      } else {
        auto again = [&] {
          loss = Tensor();  // (the first graph's last reference)
          loss = run_forward();
          return scaler ? scaler->scale(loss) : loss;
        };
        stepped = in_backward->backward(std::move(scaled), again, scaler, masters, options);
      }
      if (dp) dp->finish_backward();
      MG_CHECK(rng.offset() - start <= kMicroBatchCounters, ValueError, "train::train_step: a micro-batch drew ",
               rng.offset() - start, " random numbers, more than the ", kMicroBatchCounters, " reserved for each");
    }
    rng.set_offset(step_offset + uint64_t(micro_batches) * kMicroBatchCounters);
    if (dp) total = dp->group().all_reduce(total);
    if (stepped) {
      if (scaler) scaler->update();
      return total;
    }
    phase("optimizer");
    std::optional<HostMemoryScope> on_host;  // offloaded parameters: the optimizer steps in host memory
    if (dp && dp->offloads_parameters()) on_host.emplace(dp->units()->device());
    // Half parameters: the float32 masters' step reads the half gradients (times 1/scale and the
    // clipping coefficient) with no float32 copy of them (amp::MasterWeights::step).
    if (scaler && opt) {
      masters ? scaler->unscale_(*opt, *masters) : scaler->unscale_(*opt);
      if (dp) scaler->merge_found_inf(dp->any_rank(scaler->found_inf()));
    } else if (masters) {
      masters->use_model_grads();
    }
    if (options.clip_norm > 0)
      dp        ? dp->clip_grad_norm_(options.clip_norm)
      : masters ? masters->clip_grad_norm_(options.clip_norm)
                : optim::clip_grad_norm_(model.parameters(), options.clip_norm);
    if (scaler && opt) {
      masters ? scaler->step(*opt, *masters) : scaler->step(*opt);
      scaler->update();
    } else if (opt) {
      masters ? masters->step(*opt) : opt->step();
    } else if (masters) {
      masters->drop_grads();
    }
    if (dp) dp->gather_parameters();
    return total;
  } catch (...) {
    model.zero_grad();
    if (dp) dp->zero_grad();
    rng.set_offset(step_offset);
    if (scaler) *scaler = *scaler_before;
    throw;
  }
}

}  // namespace detail

Trainer::Trainer(nn::Module& model, const StepOptions& options, const OptimizerFactory& make,
                 distributed::ProcessGroup* group)
    : model_(model), options_(options) {
  MG_CHECK(options.accum >= 1, ValueError, "train::Trainer: expected accum >= 1, got ", options.accum);
  MG_CHECK(!options.step_in_backward || !options.data_parallel(), ValueError,
           "train::Trainer: step_in_backward does not run with data parallelism (a parameter could be stepped only "
           "once its bucket's reduction had finished), got world size ",
           options.world_size, " and ZeRO stage ", options.zero_stage);
  if (auto half = storage_dtype(options.precision)) model.to(*half);  // (a deferred model's placeholders: their dtype)
  nn::NamedTensors params = model.named_parameters();
  // A model built under nn::DeferredInit: ZeRO-3 and parameter offload materialize each rank's shards
  // only (ParameterUnits); otherwise every parameter is materialized whole, in its storage dtype.
  const std::shared_ptr<nn::DeferredParameters> deferred = model.deferred_parameters();
  if (deferred && options.sharding_stage() != 3 &&
      std::any_of(params.begin(), params.end(), [](auto& p) { return nn::is_placeholder(p.second); }))
    for (auto& [name, p] : params) deferred->materialize(p, name);
  MG_CHECK(!options.offload_params || options.zero_stage == 0 || options.zero_stage == 3, ValueError,
           "train::Trainer: parameter offload runs ZeRO-3's schedule; expected zero_stage 0 or 3 with it, got ",
           options.zero_stage);
  // ZeRO's shards are flat slices of parameters (stages 1-2) or 1-D pieces of flat chunks (stage 3,
  // parameter offload): an optimizer whose state needs more of a parameter (optim/registry.h) does not
  // run on them.
  const int stage = options.sharding_stage();
  const auto check_shards = [&](const optim::OptimizerEntry& e) {
    MG_CHECK(e.runs_sharded(stage), ValueError, "train::Trainer: ", e.name, " does not run under ZeRO stage ", stage,
             options.offload_params ? " (parameter offload)" : "", ": ", e.why_not_sharded(stage), "; expected ",
             optim::optimizer_names_at(stage));
  };
  if (!make && !options.optimizer.is_none()) check_shards(optim::optimizer_entry(options.optimizer.name));
  if (options.data_parallel()) {  // the masters of half parameters are dp's, sliced by rank
    const int64_t block = options.optimizer.is_none() ? 1 : optim::optimizer_entry(options.optimizer.name).block;
    MG_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size, ValueError,
             "train::Trainer: expected 0 <= rank < world_size, got rank ", options.rank, " of ", options.world_size);
    if (!group) {
      own_group_ = distributed::simulated_group(int(options.rank), int(options.world_size));
      group = own_group_.get();
    }
    dp_ = std::make_unique<distributed::DataParallel>(params, *group,
                                                      distributed::DataParallelOptions()
                                                          .zero_stage(options.sharding_stage())
                                                          .bucket_bytes(options.bucket_bytes)
                                                          .units(options.units)
                                                          .offload_parameters(options.offload_params)
                                                          .prefetch(options.unit_prefetch)
                                                          .deferred(deferred)
                                                          .slice_multiple(block));
    params = dp_->optimizer_parameters();
  } else if (storage_dtype(options.precision)) {
    masters_.emplace(params);
    params = masters_->named_parameters();
  }
  // A rank whose slices or pieces are all empty (more ranks than a unit has elements to share) steps
  // nothing: it has no optimizer, as OptimizerSpec::none().
  if (!params.empty()) opt_ = make ? make(params) : optim::make_optimizer(options.optimizer, params);
  if (const optim::OptimizerEntry* e = opt_ ? optim::entry_of(*opt_) : nullptr) check_shards(*e);
  if (dp_ && opt_) dp_->attach(*opt_);  // ZeRO-1/2: 8-bit state in the whole parameter's blocks, sliced
  if (options.grad_scaler) scaler_.emplace(options.scaler);
  if (!options.step_in_backward) return;
  MG_CHECK(opt_, ValueError, "train::Trainer: step_in_backward needs an optimizer, got none");
  in_backward_ = std::make_unique<InBackward>();
  if (!masters_) {
    in_backward_->hooks = std::make_unique<optim::StepInBackward>(*opt_);
    return;
  }
  // Half parameters: hooks on the model's; stepping one unscales its gradient into its master,
  // clips it there, steps the master and copies it back.
  amp::MasterWeights* m = &*masters_;
  InBackward* ib = in_backward_.get();
  optim::Optimizer* opt = opt_.get();
  in_backward_->hooks = std::make_unique<optim::StepInBackward>(m->model_parameters(), [m, ib, opt](size_t i) {
    m->grad_to_master(i, ib->inv_scale);
    optim::GradNormClipper::clip(m->parameters()[i].grad(), ib->coef);
    opt->step(m->parameters()[i]);
    m->master_to_param(i);
    m->model_parameters()[i].set_grad(Tensor());
  });
}

optim::StepInBackward* Trainer::in_backward() const { return in_backward_ ? in_backward_->hooks.get() : nullptr; }

Trainer::~Trainer() = default;

amp::MasterWeights* Trainer::masters() const {
  return dp_ ? dp_->masters() : masters_ ? const_cast<amp::MasterWeights*>(&*masters_) : nullptr;
}

double Trainer::step(const std::function<Tensor(int64_t)>& forward) {
  return detail::run_step(model_, opt_.get(), scaler(), masters(), forward, options_, dp_.get(), in_backward_.get());
}

}  // namespace mg::train
