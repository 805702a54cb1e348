#include <memgrad/plan/planner.h>

#include <cmath>
#include <limits>
#include <optional>

#include <memgrad/autograd/checkpoint.h>
#include <memgrad/core/autocast.h>
#include <memgrad/core/random.h>
#include <memgrad/nn/loss.h>
#include <memgrad/optim/clip.h>

namespace mg::plan {

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

// An MLP block: relu(layers[i](x)).
Tensor mlp_block(const nn::ModuleList<nn::Linear>& layers, int64_t i, const Tensor& x) {
  MemoryScope scope("layers." + std::to_string(i));
  return relu(layers[size_t(i)].forward(x));
}
Tensor gpt_block(const nn::GPT& g, int64_t i, const Tensor& x, bool selective) {
  MemoryScope scope("h." + std::to_string(i));
  nn::Block& b = (*g.h)[size_t(i)];
  // The policy's choice for this call only: the model's own setting (GPTConfig) is put back after.
  struct Restore {
    bool& flag;
    bool saved;
    ~Restore() { flag = saved; }
  } restore{b.attn->selective_recompute, b.attn->selective_recompute};
  b.attn->selective_recompute = selective;
  return b.forward(x);
}
}  // namespace

ChainModel::ChainModel(const ModelSpec& s, const Device& device) : spec_(s), device_(device) {
  if (s.kind == ModelSpec::Kind::MLP) {
    auto m = std::make_shared<MLPChain>(s.mlp_layers, s.mlp_width, TensorOptions(device));
    mlp_ = m->layers;
    module_ = m;
  } else {
    nn::GPTConfig c = s.gpt;
    c.options = c.options.device(device);
    module_ = gpt_ = std::make_shared<nn::GPT>(c);
  }
}

Tensor ChainModel::head(const Tensor& input) const {
  if (!gpt_) return input;
  MemoryScope scope("embedding");
  Tensor pos = arange(input.size(1), TensorOptions(kInt64).device(input.device()));
  return gpt_->drop->forward(gpt_->wte->forward(input) + gpt_->wpe->forward(pos));
}

Tensor ChainModel::block(int64_t i, const Tensor& x, bool selective) const {
  if (gpt_) return gpt_block(*gpt_, i, x, selective);
  if (!selective) return mlp_block(*mlp_, i, x);
  auto layers = mlp_;
  return checkpoint([layers, i](const Tensor& in) { return mlp_block(*layers, i, in); }, x,
                    CheckpointPolicy::keep_matmuls());
}

Tensor ChainModel::segment(int64_t begin, int64_t end, const Tensor& x) const {
  auto layers = mlp_;
  auto g = gpt_;
  return checkpoint(
      [layers, g, begin, end](const Tensor& in) {
        Tensor h = in;
        for (int64_t i = begin; i < end; ++i) h = g ? gpt_block(*g, i, h, false) : mlp_block(*layers, i, h);
        return h;
      },
      x);
}

Tensor ChainModel::tail(const Tensor& x, const Tensor& target) const {
  MemoryScope scope("head");
  if (!gpt_) return mse_loss(x, target);
  return nn::lm_loss(linear(gpt_->ln_f->forward(x), gpt_->wte->weight), target);
}

Tensor ChainModel::loss(const Tensor& input, const Tensor& target, const Policy& policy) const {
  Tensor x = head(input);
  const int64_t n = spec_.num_blocks();
  std::vector<int64_t> segment_end(size_t(n), -1);
  for (auto& s : policy.segments) {
    MG_CHECK(s.begin >= 0 && s.begin < s.end && s.end <= n, ValueError, "plan: expected segments inside [0, ", n,
             "), got ", policy.str());
    segment_end[size_t(s.begin)] = s.end;
  }
  for (int64_t i = 0; i < n;) {
    if (segment_end[size_t(i)] > 0) {
      x = segment(i, segment_end[size_t(i)], x);
      i = segment_end[size_t(i)];
    } else {
      x = block(i, x, policy.selective);
      ++i;
    }
  }
  return tail(x, target);
}

std::pair<Tensor, Tensor> ChainModel::zero_inputs(const InputShape& s) const {
  if (!gpt_) return {zeros({s.batch, spec_.mlp_width}, device_), zeros({s.batch, spec_.mlp_width}, device_)};
  TensorOptions o = TensorOptions(kInt64).device(device_);
  return {zeros({s.batch, s.seq_len}, o), zeros({s.batch, s.seq_len}, o)};
}

std::optional<DType> autocast_dtype(Precision p) {
  if (p == Precision::Float16) return kFloat16;
  if (p == Precision::BFloat16) return kBFloat16;
  return std::nullopt;
}

double train_step(const ChainModel& model, optim::Optimizer* opt, amp::GradScaler* scaler,
                  const std::function<std::pair<Tensor, Tensor>(int64_t)>& batch, const Policy& policy,
                  const StepOptions& options, distributed::DataParallel* dp) {
  MG_CHECK(options.accum >= 1, ValueError, "plan::train_step: expected accum >= 1, got ", options.accum);
  model.module().zero_grad();
  // A step that fails (out of memory, say) leaves no trace, so that it can be retried or run
  // smaller: gradients cleared again, the generator rewound, the scaler as it was. The optimizer's
  // step is all-or-nothing itself, and it is the last thing that changes a parameter.
  const std::optional<amp::GradScaler> scaler_before = scaler ? std::optional(*scaler) : std::nullopt;
  Generator& rng = default_generator();
  const uint64_t step_offset = rng.offset();
  try {
    if (dp) dp->zero_grad();
    const std::optional<DType> half = autocast_dtype(options.precision);
    const int64_t first = dp ? dp->rank() * options.accum : 0;                  // this rank's first micro-batch
    const int64_t micro_batches = options.accum * (dp ? dp->world_size() : 1);  // in the whole step
    double total = 0;
    Tensor x, y, loss;  // live until the next micro-batch replaces them, as in a Python loop
    for (int64_t i = 0; i < options.accum; ++i) {
      const int64_t g = first + i;
      const uint64_t start = step_offset + uint64_t(g) * kMicroBatchCounters;
      rng.set_offset(start);
      std::tie(x, y) = batch(g);
      {
        std::optional<amp::AutocastGuard> autocast;
        if (half) autocast.emplace(*half);
        loss = model.loss(x, y, policy);
      }
      if (micro_batches > 1) loss = loss * (1.0 / double(micro_batches));
      total += loss.is_meta() ? std::numeric_limits<double>::quiet_NaN() : loss.item<double>();
      if (dp) dp->prepare_backward(i + 1 == options.accum);
      (scaler ? scaler->scale(loss) : loss).backward();
      if (dp) dp->finish_backward();
      MG_CHECK(rng.offset() - start <= kMicroBatchCounters, ValueError, "plan::train_step: a micro-batch drew ",
               rng.offset() - start, " random numbers, more than the ", kMicroBatchCounters, " reserved for each");
    }
    rng.set_offset(step_offset + uint64_t(micro_batches) * kMicroBatchCounters);
    if (dp) total = dp->group().all_reduce(total);
    amp::MasterWeights* masters = dp ? dp->masters() : nullptr;
    if (scaler && opt) {
      masters ? scaler->unscale_(*opt, *masters) : scaler->unscale_(*opt);
      if (dp) scaler->merge_found_inf(dp->any_rank(scaler->found_inf()));
    } else if (masters) {
      masters->grads_to_masters();
    }
    if (options.clip_norm > 0)
      dp ? dp->clip_grad_norm_(options.clip_norm)
         : optim::clip_grad_norm_(model.module().parameters(), options.clip_norm);
    if (scaler && opt) {
      masters ? scaler->step(*opt, *masters) : scaler->step(*opt);
      scaler->update();
    } else if (opt) {
      opt->step();
      if (masters) masters->masters_to_params();
    }
    if (dp) dp->gather_parameters();
    return total;
  } catch (...) {
    model.module().zero_grad();
    if (dp) dp->zero_grad();
    rng.set_offset(step_offset);
    if (scaler) *scaler = *scaler_before;
    throw;
  }
}

}  // namespace mg::plan
