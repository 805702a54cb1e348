// Data-parallel training as PyTorch's DistributedDataParallel, with the optimizer-state, gradient
// and parameter sharding of ZeRO stages 1 to 3 (Rajbhandari et al. 2020). Every rank runs its own
// micro-batches; at stages 0-2 it holds the whole model and the gradients are summed across ranks in
// buckets while backward still runs, each bucket as soon as every gradient in it has been accumulated.
//
//   ZeRO stage 0: every rank all-reduces the gradients and steps every parameter (plain DDP).
//   ZeRO stage 1: gradients are all-reduced as in stage 0, but each rank keeps the optimizer state
//                 (and, for half parameters, the float32 master weights) of its slice of each
//                 parameter only, steps that slice, and the updated slices are all-gathered.
//   ZeRO stage 2: the gradients are reduce-scattered instead: each rank keeps only the reduced
//                 gradients of its slices; the full gradients are freed bucket by bucket.
//   ZeRO stage 3: the parameters themselves are sharded (PyTorch's FSDP): each rank keeps its shard
//                 of each unit of parameters (options.units: a module path each, the rest one root
//                 unit), gathered for the unit's forward and backward only; see parameter_units.h,
//                 whose schedule the model runs through prepare_forward() and run_unit(). With
//                 offload_parameters the shards, their gradients and the optimizer state live in the
//                 device's host memory (core/host_memory.h) and are stepped there, at any world size.
//
// Stages 1-2: parameter j of n elements is cut into `size` slices of c = ceil(n / size) elements (rounded
// up to options.slice_multiple): rank r holds elements [r c, min(n, (r + 1) c)) (possibly none). Stage 3: rank r holds
// the piece of each parameter that falls in its chunk of the parameter's unit (ParameterUnits::piece). Buckets hold
// parameters in reverse order (the order backward reaches them), up to `bucket_bytes` each, one dtype and device per
// bucket.
//
// In the ledger (each rank's own):
//   stage 0-1  the bucket an all-reduce runs on becomes the gradients' memory: each .grad is a view of
//              it (Gradient, owner "ddp.bucket.<k>"); there are no other copies.
//   stage 2    the bucket a reduce-scatter reads is Workspace ("zero.reduce_scatter.<k>"), alive from
//              its launch until the next bucket's launch; the reduced slices are Gradient
//              ("zero.grad_shard.<k>").
//   stage 1-2  optimizer state is created for the slices only (OptimizerState under the parameter's
//              name); the all-gather after the step runs on one bucket-sized Workspace buffer at a
//              time ("zero.all_gather.<k>").
//
// A training step (what train::train_step does):
//   dp.zero_grad();
//   for each micro-batch i of A: dp.prepare_forward(); forward (the units through dp.run_unit);
//                                loss / (A * world); dp.prepare_backward(i == A - 1);
//                                backward(); dp.finish_backward();
//   [scaler: unscale, found_inf merged with dp.any_rank]; dp.clip_grad_norm_(...);
//   opt.step() [half parameters: dp.masters()->use_model_grads() before clipping, then
//   dp.masters()->step(opt) instead]; dp.gather_parameters();
// with `opt` built over dp.optimizer_parameters().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <memgrad/amp/master_weights.h>
#include <memgrad/distributed/parameter_units.h>
#include <memgrad/distributed/process_group.h>
#include <memgrad/nn/deferred.h>
#include <memgrad/nn/module.h>
#include <memgrad/optim/optimizer.h>

namespace mg::distributed {

struct DataParallelOptions {
  int zero_stage_ = 0;                        // 0, 1, 2 or 3
  int64_t bucket_bytes_ = int64_t(25) << 20;  // as PyTorch's bucket_cap_mb = 25 (stages 0-2)
  std::vector<std::string> units_;            // stage 3: module paths, one unit each (UnitOptions::units)
  bool offload_ = false;                      // stage 3: shards in host memory (UnitOptions::offload)
  bool prefetch_ = true;                      // stage 3: gather the next unit ahead (UnitOptions::prefetch)
  // Stage 3: the recipes of placeholder parameters (a model built under nn::DeferredInit), each
  // rank materializing its shards only (UnitOptions::deferred).
  std::shared_ptr<nn::DeferredParameters> deferred_;
  // Stages 1-2: every rank's slice of a parameter starts at a multiple of this many elements (c is
  // rounded up to one), so that state kept in blocks of them (8-bit state: Adam8bit::kBlockSize) is
  // the whole parameter's blocks, sliced. 1: slices of ceil(n / size).
  int64_t slice_multiple_ = 1;
  DataParallelOptions& zero_stage(int s) { return zero_stage_ = s, *this; }
  DataParallelOptions& bucket_bytes(int64_t b) { return bucket_bytes_ = b, *this; }
  DataParallelOptions& units(std::vector<std::string> u) { return units_ = std::move(u), *this; }
  DataParallelOptions& offload_parameters(bool on = true) { return offload_ = on, *this; }
  DataParallelOptions& prefetch(bool on) { return prefetch_ = on, *this; }
  DataParallelOptions& deferred(std::shared_ptr<nn::DeferredParameters> d) { return deferred_ = std::move(d), *this; }
  DataParallelOptions& slice_multiple(int64_t elements) { return slice_multiple_ = elements, *this; }
};

// One bucket: parameters (indices into the constructor's list), their dtype, and its sizes.
struct BucketLayout {
  std::vector<size_t> params;
  DType dtype = kFloat32;
  int64_t elements = 0;  // sum of the parameters' sizes: the all-reduce buffer (stages 0-1)
  int64_t chunk = 0;     // sum of their slice sizes c: one rank's part of the reduce-scatter and all-gather
};

class DataParallel {
 public:
  // `params` (name, leaf that requires grad; contiguous; all float32/float64, or all half with float32
  // masters made here) are broadcast from rank 0, so every rank starts from the same values (at stage 3
  // they may be placeholders with options.deferred's recipes: every rank materializes its shards).
  DataParallel(const nn::NamedTensors& params, ProcessGroup& group, const DataParallelOptions& options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  ProcessGroup& group() const;
  int rank() const;
  int world_size() const;
  int zero_stage() const;
  const std::vector<BucketLayout>& buckets() const;  // stages 0-2
  // Stage 3: the units (null otherwise).
  const ParameterUnits* units() const;
  bool offloads_parameters() const;
  // Rank `rank`'s slice of parameter `i`: elements [first, second) of the flattened parameter.
  std::pair<int64_t, int64_t> slice(size_t i, int rank) const;

  // What the optimizer updates on this rank, by name: the parameters (stage 0) or this rank's slices
  // of them (views into the parameters; parameters whose slice is empty are left out), or, for half
  // parameters, float32 masters of those. Build the optimizer over exactly these.
  nn::NamedTensors optimizer_parameters() const;
  // The float32 masters for half parameters (null for float32/float64 ones).
  amp::MasterWeights* masters() const;
  // Tells `opt` (built over optimizer_parameters(), before its first step) which slice of which
  // parameter each of its tensors is (Optimizer::set_slice), so that state whose form depends on the
  // whole parameter (8-bit blocks) is the whole's, sliced. ValueError when such state is kept in
  // blocks that the slices cut (build with slice_multiple of the block).
  void attach(optim::Optimizer& opt) const;

  // Drops every gradient: the parameters', the slices' and the masters' (stage 3: and anything the
  // units have in flight).
  void zero_grad(bool set_to_none = true);
  // Call before each forward (stage 3: gathers the root unit). The forward runs unit k of
  // options.units as run_unit(k, forward), which gathers and releases it around `forward` (the
  // identity at stages 0-2).
  void prepare_forward();
  Tensor run_unit(size_t k, const std::function<Tensor()>& forward);
  // Stage 3: every parameter gathered while the result lives (collective; see
  // ParameterUnits::gather_all), to run the model outside run_unit (generate text, say); null at
  // stages 0-2, where the parameters are always whole.
  std::unique_ptr<ParameterUnits::Gathered> full_parameters();
  // Call before each backward. sync false: the gradients accumulate locally and are reduced with a
  // later micro-batch's (as DDP's no_sync); stage 2 reduces every micro-batch regardless.
  void prepare_backward(bool sync = true);
  // Call after each backward: launches the buckets the hooks did not (those with parameters that got
  // no gradient here: they count as zeros), waits for every reduction, and gives the optimizer's
  // parameters their gradients, summed over ranks. A parameter no rank gave a gradient keeps none.
  void finish_backward();
  // True on every rank when `flag` is true on any (e.g. inf/NaN in one rank's slice of the gradients).
  bool any_rank(bool flag) const;
  // optim::clip_grad_norm_ over the optimizer parameters' gradients; with slices (stages 1-2) the
  // norm is combined across ranks, so every rank scales by the same factor.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);
  // After the optimizer step: all-gathers the updated slices into every rank's parameters (stages
  // 1-2; nothing at stage 0).
  void gather_parameters();

  // The optimizer's state with every rank's slices gathered: the keys and shapes an optimizer over
  // the whole parameters (in constructor order) would have, so a run of any world size can load it;
  // for half parameters also "master.<i>" (float32). State kept per element is gathered element by
  // element, state kept in blocks (Optimizer::StateSpec::block) block by block; other state (factored
  // moments) only at stage 0, where every rank holds the whole. Collective: every rank gets the dict.
  optim::StateDict state_dict(const optim::Optimizer& opt) const;
  // Loads such a dict into `opt` (built over optimizer_parameters()), each rank taking its slices.
  void load_state_dict(optim::Optimizer& opt, const optim::StateDict& dict);
  // The model's state dict (`model`: the module whose parameters were given) with every parameter
  // whole: at stage 3 gathered from the ranks' pieces, one parameter at a time (collective), so that
  // no unit need be gathered on the device; the module's own at stages 0-2.
  nn::StateDict model_state_dict(const nn::Module& model) const;
  // Loads such a dict: at stage 3 each rank copies its piece of every parameter into its shard (every
  // name, shape and dtype checked before anything is written; masters come with load_state_dict);
  // model.load_state_dict at stages 0-2.
  void load_model_state_dict(nn::Module& model, const nn::StateDict& dict);
  // Which rank holds which slice of each parameter, with the optimizer state (and master) bytes each
  // rank's ledger holds for it. Collective; every rank gets the text.
  std::string shard_table(const optim::Optimizer& opt) const;

  // Seconds this process spent blocked waiting for reductions and gathers (since construction; stage
  // 3 with offload: copies between host and device too).
  double communication_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mg::distributed
