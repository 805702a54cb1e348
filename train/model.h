// The built-in models (an MLP and a GPT) as chains of blocks (ChainModel), and their training step.
#pragma once
#include <functional>
#include <memory>
#include <utility>

#include <memgrad/nn/gpt.h>
#include <memgrad/train/policy.h>
#include <memgrad/train/trainer.h>

namespace mg::train {

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
  // deferred: built under nn::DeferredInit (placeholder parameters, their initial values recorded),
  // for a Trainer that materializes only what this rank holds (data parallelism; see nn/deferred.h).
  ChainModel(const ModelSpec& spec, const Device& device, bool deferred = false);
  const ModelSpec& spec() const { return spec_; }
  nn::Module& module() const { return *module_; }
  const Chain& chain() const { return chain_; }
  // input and target: MLP [batch, width] float32; GPT int64 token ids [batch, seq_len]. With `dp`
  // (ZeRO-3, parameter offload) each block runs as its unit (DataParallel::run_unit).
  Tensor loss(const Tensor& input, const Tensor& target, const Policy& policy,
              distributed::DataParallel* dp = nullptr) const;
  // The module paths of the blocks ("h.0", ... for the GPT; "layers.0", ... for the MLP): the units
  // of ZeRO-3 and parameter offload; the rest (embeddings, final norm) is their root unit.
  std::vector<std::string> unit_names() const;
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

// One training step of a ChainModel, as plan::plan() runs it on meta and the memgrad command for real:
// trainer.step over `batch(i)`, run under `policy`. Micro-batch i's input and target stay alive
// until the next replaces them (as in a Python loop); `batch` is called once per micro-batch, also when
// step_in_backward runs its forward twice.
double train_step(const ChainModel& model, Trainer& trainer,
                  const std::function<std::pair<Tensor, Tensor>(int64_t)>& batch, const Policy& policy);
// The same with the pieces held by the caller: `opt` (over dp->optimizer_parameters() with `dp`),
// `scaler` (may be null) and `dp` (may be null; its masters for half parameters), as Trainer::step.
double train_step(const ChainModel& model, optim::Optimizer* opt, amp::GradScaler* scaler,
                  const std::function<std::pair<Tensor, Tensor>(int64_t)>& batch, const Policy& policy,
                  const StepOptions& options, distributed::DataParallel* dp = nullptr);

}  // namespace mg::train
