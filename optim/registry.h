// The optimizers by name, in one place: what `memgrad train|plan --optimizer` takes, what
// train::Trainer builds and what the planner counts. An entry holds the name, a factory, and what the
// optimizer's state is, which decides where it runs: on ZeRO's shards or not, and whether a sharded
// state can be gathered into one state file. docs/optimizers.md adds one.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <memgrad/nn/module.h>
#include <memgrad/optim/optimizer.h>

namespace mg::optim {

// What an optimizer keeps per parameter.
enum class StateLayout {
  // Tensors shaped like the parameter (or none): a flat slice or a 1-D piece of a parameter is
  // stepped exactly as inside the whole, so the state shards at every ZeRO stage.
  PerElement,
  // Codes with one scale per block of elements (the 8-bit Adams): a rank's flat slice (ZeRO 1-2)
  // starts at a whole block (DataParallelOptions::slice_multiple), so it holds the whole parameter's
  // blocks, sliced; 1-D pieces of flat chunks (ZeRO-3, parameter offload) would cut blocks.
  Quantized,
  // Statistics of a matrix's rows and columns, and a step scaled per parameter (Adafactor): needs
  // whole parameters, so no ZeRO stage and no parameter offload.
  Factored,
};

// Which optimizer a training step builds, with what the memgrad command sets: everything else is
// the optimizer's default (a plan's bytes do not depend on it).
struct OptimizerSpec {
  std::string name;          // a registered name; empty: no optimizer (OptimizerSpec::none())
  std::optional<double> lr;  // none: the optimizer's default
  double momentum = 0;       // for an entry with momentum (sgd): its state exists only when > 0
  OptimizerSpec();           // the default optimizer (default_optimizer())
  OptimizerSpec(std::string name, double momentum = 0) : name(std::move(name)), momentum(momentum) {}
  OptimizerSpec(const char* name, double momentum = 0) : OptimizerSpec(std::string(name), momentum) {}
  static OptimizerSpec none() { return OptimizerSpec(std::string()); }
  bool is_none() const { return name.empty(); }
  std::string label() const;  // the name, "+momentum" when it has some
};

struct OptimizerEntry {
  std::string name;  // what --optimizer takes
  std::string type;  // its Optimizer::type()
  std::string help;  // one phrase for --help
  StateLayout state = StateLayout::PerElement;
  bool has_momentum = false;  // takes OptimizerSpec::momentum
  // Elements per quantization block (Quantized; 1 otherwise): a ZeRO 1-2 slice starts at a multiple.
  int64_t block = 1;
  // Its state's bytes per parameter element for float32 parameters: exact for PerElement; for
  // Quantized those of a quantized tensor; Factored's tend to 0 as matrices grow.
  std::function<double(const OptimizerSpec&)> state_bytes;
  std::function<std::unique_ptr<Optimizer>(const nn::NamedTensors&, const OptimizerSpec&)> make;

  // Whether it runs on ZeRO stage `stage`'s shards (1-2: flat slices of each parameter; 3, and
  // parameter offload, which runs stage 3's schedule: 1-D pieces of flat chunks) as on whole
  // parameters. Stage 0 always.
  bool runs_sharded(int stage) const;
  // Why it does not run at `stage` (for an error message; "" where it does).
  std::string why_not_sharded(int stage) const;
};

// Every optimizer, in the order --help and `memgrad plan` list them.
const std::vector<OptimizerEntry>& optimizers();
const std::string& default_optimizer();  // what OptimizerSpec() names
// The entry of `name`; ValueError listing the registered names otherwise.
const OptimizerEntry& optimizer_entry(const std::string& name);
// The entry whose optimizer `opt` is (by its type()), or null for one built outside the registry.
const OptimizerEntry* entry_of(const Optimizer& opt);
std::vector<std::string> optimizer_names();
// The names of the optimizers that run at ZeRO stage `stage`: "sgd, adam, adamw or lion".
std::string optimizer_names_at(int stage);
// The optimizer `spec` names over `params` (null for none).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, const nn::NamedTensors& params);

}  // namespace mg::optim
