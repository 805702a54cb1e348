// Parameters that do not stay resident on the device: ZeRO stage 3 (PyTorch's FSDP) and parameter
// offload to host memory (FSDP's CPUOffload, ZeRO-Offload), as one mechanism. Between uses a
// parameter's only copy is this rank's shard of it; a module's parameters come to the device for its
// forward and again for its backward, and leave after each.
//
// Units. The parameters are cut into units: one per module path given (a transformer block, say:
// the parameters named "<path>.*") and a root unit of all the others (embeddings, final norm). A
// unit's parameters are laid end to end in one flat buffer, padded to a multiple of the world size N,
// and the parameters are views of it: the same storage, whose bytes come and go
// (Storage::release_bytes), so the tensors autograd saved in forward find their bytes again in
// backward. Rank r's shard is chunk r of that buffer (chunk = ceil(elements / N)), kept on the device
// (ZeRO-3) or in host memory (offload, core/host_memory.h; N may be 1, where the shard is the whole
// buffer). Flat units, as FSDP1's flat parameters, rather than FSDP2's per-parameter dim-0 shards:
// the gathered buffer is the parameters' own storage, so a unit arrives with one all-gather and no
// copy into separate unsharded tensors (FSDP2 holds both for a moment), and the padding is below N
// elements per unit, not per parameter. The price is that a shard cuts parameters at any element: the
// optimizer updates each parameter's piece of this rank's shard as a 1-D view (piece_view), which
// every element-wise optimizer, loss scaling and global-norm clipping handle as they are.
//
// The schedule of one micro-batch (every rank issues the same collectives in the same order):
//   prepare_forward   gathers the root unit (held until its gradients are reduced) and prefetches unit 0
//   run(k, forward)   waits for unit k's gather (or gathers it), prefetches unit k + 1, runs the
//                     forward, registers a hook on its output and releases the unit (reshard after
//                     forward), except the last unit, whose backward comes next
//   output's hook     (backward reaches unit k) gathers unit k again, gives its parameters gradient
//                     buffers that are views of one flat buffer, prefetches unit k - 1
//   post-accumulate   (every parameter of unit k has its gradient) releases the unit's parameters and,
//                     in unit order (k = n-1 .. 0, then the root), reduce-scatters the flat gradient: the
//                     reduced chunk is added to this rank's gradient shard (copied to host memory when
//                     offloaded), one reduction (or copy out) in flight while the next unit's backward runs
//   finish_backward   completes the reductions and hands each parameter's piece its gradient
// A checkpoint segment's recompute runs its units again through run(), so they are gathered again. A
// prefetch is an all-gather that runs while the current unit computes: on the MPI group's thread
// (cpu), on NCCL's stream (cuda); an offloaded unit's copy to the device runs on a copy thread (cpu)
// or a side stream (cuda). With N > 1 and offload, the shard is copied to the device before its
// all-gather is issued (on cpu on the calling thread).
//
// In the ledger (each rank's own): the shards are Parameter ("<unit> (shard)"); a gathered unit is
// Parameter ("<unit> (gathered)") while its bytes are present; the flat gradient of a unit in backward
// is Gradient ("<unit> (gathered grad)"), and the reduced chunks Gradient ("<unit> (grad shard)").
// Offloaded, the shards and gradient shards are in the device's host memory instead.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <memgrad/distributed/process_group.h>
#include <memgrad/nn/deferred.h>
#include <memgrad/nn/module.h>

namespace mg::distributed {

struct UnitOptions {
  // Module paths: unit k holds the parameters whose names start with units[k] + "."; the rest form
  // the root unit (the last).
  std::vector<std::string> units;
  bool offload = false;  // shards in host memory (HostMemoryScope of the parameters' device)
  bool prefetch = true;  // gather the next unit while the current one runs
  // The parameters are placeholders (a model built under nn::DeferredInit): each rank materializes
  // its shards alone from these recipes, on deferred->device(), with the values the whole model would
  // have; no unit is ever whole while building.
  std::shared_ptr<nn::DeferredParameters> deferred{};
};

// What the units moved and waited for, on this rank, since construction.
struct UnitStats {
  int64_t gathers = 0, reductions = 0;
  int64_t gathered_bytes = 0, reduced_bytes = 0;  // the unit buffers all-gathered and reduce-scattered
  int64_t copied_bytes = 0;                       // between host memory and the device (offload)
  // Seconds blocked waiting for a unit to arrive (its all-gather, its copy to the device) and for
  // its gradient to leave (its reduce-scatter, its copy to host memory).
  double gather_wait = 0, reduce_wait = 0;
  double copy_seconds = 0;  // seconds the copies took (cpu: on the copy thread, whether waited for or not)
};

class ParameterUnits {
 public:
  // `params`: the model's parameters (contiguous floating leaves that require grad, one dtype and
  // device), already equal on every rank, or placeholders with options.deferred's recipes. They
  // become views of their units' flat buffers, released.
  ParameterUnits(const nn::NamedTensors& params, ProcessGroup& group, const UnitOptions& options);
  ~ParameterUnits();
  ParameterUnits(const ParameterUnits&) = delete;
  ParameterUnits& operator=(const ParameterUnits&) = delete;

  size_t size() const;  // units, the root last
  const std::string& name(size_t unit) const;
  int64_t elements(size_t unit) const;  // its parameters' elements, unpadded
  int64_t chunk(size_t unit) const;     // elements of one rank's shard
  size_t unit_of(size_t param) const;
  int64_t offset(size_t param) const;  // where the parameter starts in its unit's flat buffer
  bool offloaded() const;
  const Device& device() const;  // where the parameters compute
  // Rank `rank`'s piece of parameter i: elements [first, second) of the flattened parameter (first ==
  // second: none). Pieces of consecutive ranks are consecutive.
  std::pair<int64_t, int64_t> piece(size_t i, int rank) const;
  // The most elements of parameter i any rank's piece holds (without visiting every rank).
  int64_t longest_piece(size_t i) const;
  // This rank's piece of parameter i, a 1-D view of its shard (undefined when empty).
  Tensor piece_view(size_t i) const;

  // The schedule (see the top of this file).
  void prepare_forward();
  Tensor run(size_t unit, const std::function<Tensor()>& forward);
  void prepare_backward();
  void finish_backward();  // collective
  // Drops the gradient shards (set_to_none, else zeroes them) and anything in flight; every unit
  // released. After a failed step too.
  void reset(bool set_to_none = true);

  // Every unit gathered while the guard lives (collective), to run the model outside run() (generate
  // text, say). What is written into the gathered parameters is not kept: the shards are their home.
  class Gathered {
   public:
    ~Gathered();
    Gathered(const Gathered&) = delete;
    Gathered& operator=(const Gathered&) = delete;

   private:
    friend class ParameterUnits;
    explicit Gathered(ParameterUnits* units) : units_(units) {}
    ParameterUnits* units_;
  };
  std::unique_ptr<Gathered> gather_all();

  const UnitStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mg::distributed
