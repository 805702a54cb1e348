// Module: the base of every layer. A module owns named parameters (leaf tensors that require
// grad), buffers (state without gradients) and children; names join with '.' into paths such
// as "h.0.attn.c_attn.weight", which are also the parameters' owner labels in the memory ledger.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <memgrad/core/memory.h>
#include <memgrad/core/tensor.h>

namespace mg::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// A flat map from dotted names to tensors: what state_dict() returns and safetensors files hold.
using StateDict = std::map<std::string, Tensor>;

class DeferredParameters;

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module");
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // Parameters of this module and its children, each once (tied weights appear under their first
  // name), in registration order.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  // This module (name "") and every descendant with its path.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  int64_t num_parameters() const;  // elements, each tied tensor counted once

  // Training mode switches dropout; train(false) equals eval().
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves or converts parameters and buffers in place: the tensors keep their identity (as
  // PyTorch's module.to), so ties survive. dtype applies to floating tensors only.
  void to(const Device& device);
  void to(DType dtype);
  void to(const Device& device, DType dtype);

  // Clears (set_to_none) or zeroes every parameter's .grad.
  void zero_grad(bool set_to_none = true);

  // Built under an nn::DeferredInit (nn/deferred.h): the recipes its placeholder parameters
  // materialize from; null otherwise.
  const std::shared_ptr<DeferredParameters>& deferred_parameters() const { return deferred_; }

  // Parameters and persistent buffers by path. load_state_dict validates every name, shape and
  // dtype before copying anything, so a bad dict leaves the module unchanged; strict also
  // rejects missing and unexpected names.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& dict, bool strict = true);

 protected:
  // Allocates an uninitialised parameter of `shape` under MemoryScope(Parameter, name) (nested in
  // the scope the module is built in) and registers it. Initialise it in place. Under an
  // nn::DeferredInit it is a placeholder instead (no bytes), which nn::init's fills record.
  Tensor& register_parameter(const std::string& name, const Shape& shape, const TensorOptions& options = {});
  // Registers an existing tensor; its bytes are relabelled Parameter.
  Tensor& register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  // Registers an existing child (its parameters keep the owner labels they were built with).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Builds a child inside MemoryScope(name), so its parameters' owner labels carry its path.
  template <class M, class... Args>
  std::shared_ptr<M> register_module(const std::string& name, Args&&... args) {
    std::shared_ptr<M> m;
    {
      MemoryScope scope(name);
      m = std::make_shared<M>(std::forward<Args>(args)...);
    }
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name) const;
  void convert(const Device* device, const DType* dtype);
  struct Entry {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  std::string type_name_;
  bool training_ = true;
  std::vector<Entry> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<DeferredParameters> deferred_;
};

// A module with a one-tensor forward; call it like a function.
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

}  // namespace mg::nn
