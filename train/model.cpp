// The built-in models as chains of blocks (ChainModel) and their training step.
#include <memgrad/train/model.h>

#include <cstring>
#include <optional>

#include <memgrad/autograd/checkpoint.h>
#include <memgrad/core/memory.h>
#include <memgrad/nn/deferred.h>
#include <memgrad/nn/loss.h>
#include <memgrad/train/step_impl.h>

namespace mg::train {

ModelSpec ModelSpec::mlp(int64_t layers, int64_t width) {
  ModelSpec m;
  m.kind = Kind::MLP, m.mlp_layers = layers, m.mlp_width = width;
  return m;
}
ModelSpec ModelSpec::gpt_model(const nn::GPTConfig& config) {
  ModelSpec m;
  m.kind = Kind::GPT, m.gpt = config;
  return m;
}

namespace {
// The MLP's module: n Linear(width, width) layers.
class MLPChain : public nn::Module {
 public:
  MLPChain(int64_t n, int64_t width, const TensorOptions& o) : nn::Module("MLPChain") {
    layers = register_module<nn::ModuleList<nn::Linear>>("layers");
    for (int64_t i = 0; i < n; ++i) layers->emplace_back(width, width, true, o);
  }
  std::shared_ptr<nn::ModuleList<nn::Linear>> layers;
};

// An MLP block: relu(layers[i](x)); selective runs it as a segment keeping the matmul's output.
Chain mlp_chain(const std::shared_ptr<nn::ModuleList<nn::Linear>>& layers) {
  auto block = [layers](int64_t i, const Tensor& x) {
    MemoryScope scope("layers." + std::to_string(i));
    return relu((*layers)[size_t(i)].forward(x));
  };
  return {int64_t(layers->size()), [block](int64_t i, const Tensor& x, bool selective) -> Tensor {
            if (!selective) return block(i, x);
            return checkpoint([block, i](const Tensor& in) { return block(i, in); }, x,
                              CheckpointPolicy::keep_matmuls());
          }};
}

// A GPT block; selective checkpoints its attention core for this call only (the model's own
// setting, GPTConfig::selective_recompute, is put back after).
Chain gpt_chain(const std::shared_ptr<nn::GPT>& g) {
  return {g->config.n_layer, [g](int64_t i, const Tensor& x, bool selective) {
            MemoryScope scope("h." + std::to_string(i));
            nn::Block& b = (*g->h)[size_t(i)];
            struct Restore {
              bool& flag;
              bool saved;
              ~Restore() { flag = saved; }
            } restore{b.attn->selective_recompute, b.attn->selective_recompute};
            b.attn->selective_recompute = selective;
            return b.forward(x);
          }};
}
}  // namespace

ChainModel::ChainModel(const ModelSpec& s, const Device& device, bool deferred) : spec_(s), device_(device) {
  std::optional<nn::DeferredInit> init;
  if (deferred) init.emplace(std::make_shared<nn::DeferredParameters>(device));
  if (s.kind == ModelSpec::Kind::MLP) {
    auto m = std::make_shared<MLPChain>(s.mlp_layers, s.mlp_width, TensorOptions(device));
    mlp_ = m->layers;
    module_ = m;
    chain_ = mlp_chain(mlp_);
  } else {
    nn::GPTConfig c = s.gpt;
    c.options = c.options.device(device);
    module_ = gpt_ = std::make_shared<nn::GPT>(c);
    chain_ = gpt_chain(gpt_);
  }
}

Tensor ChainModel::head(const Tensor& input) const {
  if (!gpt_) return input.to((*mlp_)[0].weight.dtype());  // a half model takes a half copy of the float32 data
  MemoryScope scope("embedding");
  Tensor pos = arange(input.size(1), TensorOptions(kInt64).device(input.device()));
  return gpt_->drop->forward(gpt_->wte->forward(input) + gpt_->wpe->forward(pos));
}

// The loss runs in float32 (a half model's output is widened first, as Megatron does): a float16
// loss times the GradScaler's 2^16 would overflow, and so would its gradient.
Tensor ChainModel::tail(const Tensor& x, const Tensor& target) const {
  MemoryScope scope("head");
  if (!gpt_) return mse_loss(x.to(kFloat32), target);
  return nn::lm_loss(linear(gpt_->ln_f->forward(x), gpt_->wte->weight).to(kFloat32), target);
}

Tensor ChainModel::loss(const Tensor& input, const Tensor& target, const Policy& policy,
                        distributed::DataParallel* dp) const {
  if (!dp || !dp->units()) return tail(run_chain(chain_, head(input), policy), target);
  Chain units = chain_;  // each block gathered around its run (a recompute's too)
  units.block = [dp, block = chain_.block](int64_t i, const Tensor& x, bool selective) {
    return dp->run_unit(size_t(i), [&] { return block(i, x, selective); });
  };
  return tail(run_chain(units, head(input), policy), target);
}

std::vector<std::string> ChainModel::unit_names() const {
  std::vector<std::string> names;
  for (int64_t i = 0; i < chain_.n; ++i) names.push_back((gpt_ ? "h." : "layers.") + std::to_string(i));
  return names;
}

std::pair<Tensor, Tensor> ChainModel::zero_inputs(const InputShape& s) const {
  // Zeroed as memgrad train's data loader fills its batches: on the cpu by a plain copy (no kernel), on
  // cuda by a copy kernel. The budget runtime numbers a step's storages by the kernels that first write
  // them, and a per-tensor plan made on this program is carried out on the loader's batches.
  auto zeroed = [](const Shape& shape, const TensorOptions& o) {
    Tensor t = empty(shape, o);
    if ((t.is_meta() ? meta_target() : t.device().type) == DeviceType::CUDA)
      t.zero_();
    else if (!t.is_meta())
      std::memset(t.raw_data(), 0, t.nbytes());
    return t;
  };
  if (!gpt_) return {zeroed({s.batch, spec_.mlp_width}, device_), zeroed({s.batch, spec_.mlp_width}, device_)};
  TensorOptions o = TensorOptions(kInt64).device(device_);
  return {zeroed({s.batch, s.seq_len}, o), zeroed({s.batch, s.seq_len}, o)};
}

// ---- the training step

double train_step(const ChainModel& model, optim::Optimizer* opt, amp::GradScaler* scaler,
                  const std::function<std::pair<Tensor, Tensor>(int64_t)>& batch, const Policy& policy,
                  const StepOptions& options, distributed::DataParallel* dp) {
  Tensor x, y;  // live until the next micro-batch replaces them
  return detail::run_step(
      model.module(), opt, scaler, dp ? dp->masters() : nullptr,
      [&](int64_t g) {
        std::tie(x, y) = batch(g);
        return model.loss(x, y, policy, dp);
      },
      options, dp);
}

double train_step(const ChainModel& model, Trainer& trainer,
                  const std::function<std::pair<Tensor, Tensor>(int64_t)>& batch, const Policy& policy) {
  Tensor x, y;  // live until the next micro-batch replaces them
  int64_t drawn = -1;
  return trainer.step([&](int64_t i) {
    // step_in_backward runs the last micro-batch's forward twice (clipping, the scaler): draw it once
    if (i != drawn) std::tie(x, y) = batch(i), drawn = i;
    return model.loss(x, y, policy, trainer.data_parallel());
  });
}

}  // namespace mg::train
