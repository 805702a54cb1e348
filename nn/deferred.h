// Deferred initialization: a model built without its parameters' bytes, each rank of a data-parallel
// run then materializing only what it holds (PyTorch FSDP2's meta-device init with reset_parameters
// per shard; DeepSpeed's zero.Init). While a DeferredInit lives on this thread, the parameters that
// modules register are placeholders (meta tensors over no bytes: in no ledger, on no device), and
// nn::init's fills record how each was initialized (a recipe: a constant, or the generator's seed and
// counter offset of a uniform or normal fill, and the dtype it was written in) instead of filling
// anything; the generator advances exactly as the fills would advance it. materialize() then
// computes any range of a parameter's initial values on the target device, in float32 scratch of a
// chunk at a time converted to the parameter's dtype: the same values, to the bit, as the model built
// whole (a counter-based generator draws element i of a fill at offset + i (uniform) or + 2i (normal)).
//
//   auto deferred = std::make_shared<nn::DeferredParameters>(kCPU);
//   { nn::DeferredInit init(deferred); model = std::make_shared<nn::GPT>(config); }
//   deferred->materialize(param);                   // one parameter whole, on the cpu
//   deferred->materialize(param, shard_piece, 1000);  // or elements [1000, 1000 + piece.numel())
//
// Buffers are made on the device the module asks for, as usual. train::Trainer materializes a
// deferred model for data parallelism (ZeRO-3 and parameter offload: each rank's shards only).
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>

#include <memgrad/core/tensor.h>

namespace mg::nn {

struct InitRecipe {
  enum class Kind { Constant, Uniform, Normal } kind = Kind::Constant;
  double a = 0, b = 0;            // the constant; lo and hi; mean and std
  uint64_t seed = 0, offset = 0;  // the generator's counters the fill drew (Uniform, Normal)
  DType dtype = kFloat32;         // the dtype the fill wrote in (Module::to converts from it)
};

class DeferredParameters {
 public:
  explicit DeferredParameters(const Device& device) : device_(device) {}
  const Device& device() const { return device_; }  // where the parameters materialize
  // The recipe of a placeholder parameter (null when it has none: never filled).
  const InitRecipe* recipe(const Tensor& param) const;
  void record(const Tensor& param, const InitRecipe& recipe);
  // Fills `dst` (contiguous, on any device and floating dtype) with elements [first, first +
  // dst.numel()) of `param`'s flattened initial values. ValueError when `param` has no recipe or the
  // range is outside it.
  void materialize(const Tensor& param, const Tensor& dst, int64_t first) const;
  // `param` whole on device(), in its dtype, under MemoryScope(Parameter, owner): param.set_data(it).
  void materialize(const Tensor& param, const std::string& owner) const;

 private:
  Device device_;
  std::unordered_map<const TensorImpl*, InitRecipe> recipes_;
};

// A placeholder: a meta tensor of `shape` and `dtype` over no bytes (in no ledger).
Tensor placeholder(const Shape& shape, DType dtype);
bool is_placeholder(const Tensor& t);

// While alive on this thread: Module::register_parameter makes placeholders and nn::init records
// recipes into `params`; modules built meanwhile keep `params` (Module::deferred_parameters).
class DeferredInit {
 public:
  explicit DeferredInit(std::shared_ptr<DeferredParameters> params);
  ~DeferredInit();
  DeferredInit(const DeferredInit&) = delete;
  DeferredInit& operator=(const DeferredInit&) = delete;
  static const std::shared_ptr<DeferredParameters>& active();  // null when none

 private:
  std::shared_ptr<DeferredParameters> previous_;
};

}  // namespace mg::nn
