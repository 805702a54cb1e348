// The optimizer registry: one entry per optimizer, the only place its --optimizer name is written.
#include <memgrad/optim/registry.h>

#include <memgrad/core/error.h>
#include <memgrad/optim/adafactor.h>
#include <memgrad/optim/adam.h>
#include <memgrad/optim/adam8bit.h>
#include <memgrad/optim/lion.h>
#include <memgrad/optim/sgd.h>

namespace mg::optim {

namespace {

// An entry whose optimizer is built from `Options(lr)` (its default lr when the spec has none) and
// keeps `bytes` of state per float32 parameter element.
template <class Opt, class Options>
OptimizerEntry entry(const char* name, const char* type, const char* help, StateLayout state, double bytes) {
  OptimizerEntry e;
  e.name = name, e.type = type, e.help = help, e.state = state;
  e.state_bytes = [bytes](const OptimizerSpec&) { return bytes; };
  if (state == StateLayout::Quantized) e.block = Adam8bit::kBlockSize;
  e.make = [](const nn::NamedTensors& params, const OptimizerSpec& s) {
    return std::make_unique<Opt>(params, s.lr ? Options(*s.lr) : Options());
  };
  return e;
}

std::vector<OptimizerEntry> make_entries() {
  using L = StateLayout;
  // two uint8 codes and two float32 absmax per block
  const double quantized = 2 + 8.0 / Adam8bit::kBlockSize;
  OptimizerEntry sgd;
  sgd.name = "sgd", sgd.type = "SGD", sgd.help = "sgd", sgd.state = L::PerElement, sgd.has_momentum = true;
  sgd.state_bytes = [](const OptimizerSpec& s) { return s.momentum > 0 ? 4.0 : 0.0; };
  sgd.make = [](const nn::NamedTensors& params, const OptimizerSpec& s) {
    return std::make_unique<SGD>(params, SGDOptions(s.lr.value_or(SGDOptions().lr_)).momentum(s.momentum));
  };
  return {sgd,
          entry<Adam, AdamOptions>("adam", "Adam", "adam", L::PerElement, 8),
          entry<AdamW, AdamWOptions>("adamw", "AdamW", "adamw", L::PerElement, 8),
          entry<Adam8bit, Adam8bitOptions>("adam8bit", "Adam8bit", "adam8bit", L::Quantized, quantized),
          entry<AdamW8bit, AdamW8bitOptions>("adamw8bit", "AdamW8bit",
                                             "adamw8bit (8-bit moments in blocks of 256, as bitsandbytes)",
                                             L::Quantized, quantized),
          entry<Adafactor, AdafactorOptions>(
              "adafactor", "Adafactor", "adafactor (factored second moments, torch.optim.Adafactor)", L::Factored, 0),
          entry<Lion, LionOptions>("lion", "Lion", "lion (the sign of a momentum: one buffer, Chen et al. 2023)",
                                   L::PerElement, 4)};
}

}  // namespace

OptimizerSpec::OptimizerSpec() : name(default_optimizer()) {}

std::string OptimizerSpec::label() const { return name + (momentum > 0 ? "+momentum" : ""); }

bool OptimizerEntry::runs_sharded(int stage) const { return why_not_sharded(stage).empty(); }

std::string OptimizerEntry::why_not_sharded(int stage) const {
  if (state == StateLayout::PerElement || stage == 0 || (state == StateLayout::Quantized && stage < 3)) return "";
  if (stage < 3) return "its moments are factored and its step scaled per parameter, and a rank holds flat slices";
  return std::string("a rank steps 1-D pieces of its units' flat chunks, and its ") +
         (state == StateLayout::Quantized ? "quantization blocks" : "factored moments") + " need whole parameters";
}

const std::vector<OptimizerEntry>& optimizers() {
  static const std::vector<OptimizerEntry> entries = make_entries();
  return entries;
}

const std::string& default_optimizer() {
  static const std::string name = "adamw";
  return name;
}

const OptimizerEntry& optimizer_entry(const std::string& name) {
  for (const OptimizerEntry& e : optimizers())
    if (e.name == name) return e;
  throw ValueError("optim: expected an optimizer " + optimizer_names_at(0) + ", got '" + name + "'");
}

const OptimizerEntry* entry_of(const Optimizer& opt) {
  for (const OptimizerEntry& e : optimizers())
    if (e.type == opt.type()) return &e;
  return nullptr;
}

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const OptimizerEntry& e : optimizers()) names.push_back(e.name);
  return names;
}

std::string optimizer_names_at(int stage) {
  std::vector<std::string> names;
  for (const OptimizerEntry& e : optimizers())
    if (e.runs_sharded(stage)) names.push_back(e.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, const nn::NamedTensors& params) {
  if (spec.is_none()) return nullptr;
  return optimizer_entry(spec.name).make(params, spec);
}

}  // namespace mg::optim
