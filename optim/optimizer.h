// Optimizer base: parameter groups with their hyperparameters, step(), zero_grad(), a
// state_dict, and the per-parameter footprint of the optimizer's state. State tensors are
// created lazily at the first step (as in PyTorch) under MemoryScope(OptimizerState, <param
// name>), so the ledger shows the jump at that step and state_bytes() agrees with it.
#pragma once
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <memgrad/core/tensor.h>

namespace mg::optim {

using Hyperparameters = std::map<std::string, double>;  // "lr", "momentum", "betas1", ...
using StateDict = std::map<std::string, Tensor>;

struct ParamGroup {
  std::vector<Tensor> params;
  // One name per parameter (optional): shown in reports and used as the ledger's owner label.
  // Missing names come from the label the parameter was allocated under (its module path).
  std::vector<std::string> names;
  Hyperparameters options;  // overrides of the optimizer's defaults for this group
};

// One state tensor a step keeps for a parameter: its name, shape and dtype. Most are shaped like
// the parameter; quantized and factored state is not (8-bit codes and one absmax per block,
// Adafactor's row and column factors).
struct StateSpec {
  std::string name;
  Shape shape;
  DType dtype;
  std::string why;  // what the shape is, for error messages ("" for the parameter's shape)
  // > 0: one value per `block` elements of the flattened parameter (8-bit state's absmax), so a
  // slice of the parameter that starts at a multiple of `block` has the blocks of the whole.
  int64_t block = 0;
};

// One parameter's row of state_report(). Bytes are ledger bytes (allocator blocks).
struct StateRow {
  std::string name;
  Shape shape;
  DType dtype;
  int64_t param_bytes = 0, grad_bytes = 0;
  std::vector<std::pair<std::string, int64_t>> state;  // state tensor name and bytes
  int64_t state_bytes = 0;
  int64_t total() const { return param_bytes + grad_bytes + state_bytes; }
};
struct StateReport {
  std::vector<StateRow> rows;
  int64_t param_bytes = 0, grad_bytes = 0, state_bytes = 0;
  int64_t elements = 0;  // the parameters' elements
  // State bytes per parameter byte: 0 for SGD, 1 with momentum, 2 for Adam, 3 with amsgrad (float32
  // parameters); about 0.51 for the 8-bit Adams and near 0 for Adafactor on matrices.
  double state_per_param() const { return param_bytes ? double(state_bytes) / double(param_bytes) : 0.0; }
  // State bytes per parameter element: 8 for Adam on float32, about 2.03 for AdamW8bit.
  double state_per_element() const { return elements ? double(state_bytes) / double(elements) : 0.0; }
  std::string str() const;  // a readable table with totals
};
std::ostream& operator<<(std::ostream& os, const StateReport& r);

// Validation follows torch.optim: a parameter may appear once across all groups, a group holds at
// least one parameter, and every group's options pass check_options() whether they come from the
// constructor, add_param_group or load_state_dict.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient, without recording history.
  void step();
  // Updates `param` alone (one of this optimizer's parameters, with a gradient) as step() would:
  // for stepping each parameter inside backward, as soon as its gradient is complete
  // (optim::StepInBackward). ValueError for a tensor that is not one of the parameters.
  void step(const Tensor& param);
  // Clears (set_to_none, PyTorch's default) or zeroes every parameter's .grad.
  void zero_grad(bool set_to_none = true);
  // Mixed precision without float32 copies of the gradients (apex's FusedAdam): a float32 parameter
  // may have a float16/bfloat16 gradient (a model's half gradient, given to its float32 master by
  // amp::MasterWeights), which the step reads multiplied by `first`, then by `second` (the loss
  // scaler's 1/scale and clipping's coefficient), each product rounded to float32: the values a
  // float32 copy of the gradient scaled in place by mul_ would hold. The next step (either form)
  // uses them and clears them. SGD and Adam(W) read half gradients in their kernels; the other
  // optimizers get such a float32 copy made for one parameter at a time.
  void set_grad_factors(double first, double second = 1.0);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  void add_param_group(ParamGroup group);
  double lr(size_t group = 0) const { return groups_.at(group).options.at("lr"); }
  void set_lr(double lr);  // every group
  const std::string& type() const { return type_; }

  // The state tensors `param` keeps (or will keep from its first step) under its group's options.
  std::vector<StateSpec> state_layout(const Tensor& param) const { return state_specs(param, options_of(param)); }
  // Says that `param` (one of this optimizer's tensors, 1-D) is elements [offset, offset + numel) of a
  // flattened parameter of `whole` elements: a ZeRO rank's slice (distributed::DataParallel::attach).
  // State whose form depends on the whole parameter follows the whole: Adam8bit keeps 8-bit state for
  // the slice when the whole has min_8bit_size elements, as one process would for the whole. Call it
  // before the first step; ValueError for a tensor that is not a parameter or a range outside `whole`.
  void set_slice(const Tensor& param, int64_t offset, int64_t whole);

  // Ledger bytes of `param`'s state (0 before its first step); all parameters' without argument.
  int64_t state_bytes(const Tensor& param) const;
  int64_t state_bytes() const;
  StateReport state_report() const;

  // "state.<i>.<name>" (i counts parameters across groups in order; "step" is an int64 scalar)
  // and "param_groups.<g>.<option>" (float64 scalars). Loading validates everything first (keys,
  // shapes, dtypes, steps >= 0, each group's options with check_options) and changes nothing on error.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& dict);

 protected:
  // `defaults` holds every option the optimizer has ("lr" among them); a subclass's constructor
  // then adds its groups with add_param_groups, after which check_options dispatches to it.
  Optimizer(Hyperparameters defaults, std::string type);
  // Adds the groups a constructor was given: ValueError when there are none (torch's "empty
  // parameter list").
  void add_param_groups(std::vector<ParamGroup> groups);
  // Raises ValueError naming the option when a group's options (defaults merged in) are invalid.
  // The base requires lr >= 0 (NaN fails); subclasses check their own options and call it.
  virtual void check_options(const Hyperparameters& options) const;
  // For check_options: a boolean option (stored as a double) must be 0 or 1.
  void check_flag(const Hyperparameters& options, const char* key) const;
  // The state tensors a step keeps per parameter under a group's `options`, in creation order
  // (Adam: exp_avg, exp_avg_sq, max_exp_avg_sq with amsgrad). step() creates them all before it
  // updates anything, so running out of memory there leaves the optimizer as it was, and
  // load_state_dict accepts no other names. A subclass that keeps state tensors shaped like the
  // parameter lists them here; one whose state has other shapes or dtypes overrides state_specs.
  virtual std::vector<std::string> state_names(const Hyperparameters& options) const;
  // The state `param` keeps under `options`: by default state_names, each shaped like the parameter.
  virtual std::vector<StateSpec> state_specs(const Tensor& param, const Hyperparameters& options) const;
  // Checks a state tensor's values as load_state_dict reads them (its name, shape and dtype already
  // match the spec): raises ValueError naming `key` for values no step could have made. The base
  // accepts any.
  virtual void check_state(const std::string& key, const StateSpec& spec, const Tensor& value) const;

  struct ParamState {
    int64_t step = 0;
    std::vector<std::pair<std::string, Tensor>> tensors;  // in creation order
  };
  // A parameter that has a gradient, its name and its state.
  struct ParamUpdate {
    const Tensor* param;
    const std::string* name;
    ParamState* state;
  };
  // Applies one update to every parameter of a group that has a gradient, with the group's
  // options: all of them in one multi-tensor kernel call per device.
  virtual void update(const Hyperparameters& options, const std::vector<ParamUpdate>& params) = 0;
  // The state tensor `key` of `param`, created zeroed on first use with the shape and dtype of its
  // spec (state_specs) on the parameter's device.
  Tensor& state_tensor(ParamState& state, const Tensor& param, const std::string& name, const std::string& key);
  // The options of the group holding `param`.
  const Hyperparameters& options_of(const Tensor& param) const;
  // Whether update() takes float32 parameters with half gradients, read with grad_factors() (see
  // set_grad_factors); otherwise step() hands it each such parameter alone with a float32 copy.
  virtual bool reads_half_grads() const { return false; }
  std::pair<double, double> grad_factors() const { return grad_factors_; }
  // The elements of the parameter `param` is a slice of (set_slice), else its own.
  int64_t whole_numel(const Tensor& param) const;

 private:
  void check_group(ParamGroup& group);
  // step() over the parameters `which` accepts (all, or one for step(param)).
  void step_if(const std::function<bool(const Tensor&)>& which);
  // update() of one float32 parameter whose gradient is half, given a float32 copy scaled by the factors.
  void update_with_float32_grad(const Hyperparameters& options, const ParamUpdate& u);
  std::string type_;
  Hyperparameters defaults_;
  std::vector<ParamGroup> groups_;
  std::unordered_map<const TensorImpl*, ParamState> state_;
  std::pair<double, double> grad_factors_{1.0, 1.0};
  std::unordered_map<const TensorImpl*, int64_t> whole_;  // set_slice: the whole parameter's elements
};

// Single-group conveniences: plain parameters, or named ones (module.named_parameters()).
std::vector<ParamGroup> as_groups(const std::vector<Tensor>& params);
std::vector<ParamGroup> as_groups(const std::vector<std::pair<std::string, Tensor>>& named);

}  // namespace mg::optim
