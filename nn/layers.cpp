#include <memgrad/nn/layers.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include <memgrad/core/grad_mode.h>
#include <memgrad/nn/init.h>

namespace mg::nn {

namespace {
// PyTorch's default for Linear and Conv2d: kaiming_uniform(a = sqrt(5)) weights, which is
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and biases from the same range.
void default_init(Tensor& weight, Tensor* bias) {
  auto [fan_in, fan_out] = init::fans(weight);
  double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
  init::uniform_(weight, -bound, bound);
  if (bias && bias->defined()) init::uniform_(*bias, -bound, bound);
}
}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, const TensorOptions& options)
    : UnaryModule("Linear") {
  MG_CHECK(in_features > 0 && out_features > 0, ValueError, "Linear: expected positive sizes, got ", in_features,
           " and ", out_features);
  weight = register_parameter("weight", {out_features, in_features}, options);
  if (with_bias) bias = register_parameter("bias", {out_features}, options);
  default_init(weight, &bias);
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> k, const Conv2dOptions& conv,
               const TensorOptions& options)
    : UnaryModule("Conv2d"), conv(conv) {
  if (k.size() == 1) k.push_back(k[0]);
  MG_CHECK(k.size() == 2 && k[0] > 0 && k[1] > 0, ValueError,
           "Conv2d: expected a kernel size of one or two positive numbers");
  MG_CHECK(conv.groups_ >= 1 && in_channels % conv.groups_ == 0 && out_channels % conv.groups_ == 0, ValueError,
           "Conv2d: expected in_channels ", in_channels, " and out_channels ", out_channels, " divisible by groups ",
           conv.groups_);
  weight = register_parameter("weight", {out_channels, in_channels / conv.groups_, k[0], k[1]}, options);
  if (conv.bias_) bias = register_parameter("bias", {out_channels}, options);
  default_init(weight, &bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, conv.stride_, conv.padding_, conv.dilation_, conv.groups_);
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, const TensorOptions& options)
    : UnaryModule("LayerNorm"), normalized_shape(std::move(normalized_shape)), eps(eps) {
  if (!elementwise_affine) return;
  weight = register_parameter("weight", this->normalized_shape, options);
  bias = register_parameter("bias", this->normalized_shape, options);
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine, const TensorOptions& options)
    : UnaryModule("GroupNorm"), num_groups(num_groups), num_channels(num_channels), eps(eps) {
  MG_CHECK(num_groups > 0 && num_channels % num_groups == 0, ValueError,
           "GroupNorm: expected num_channels divisible by a positive num_groups, got ", num_channels, " channels in ",
           num_groups, " groups");
  if (!affine) return;
  weight = register_parameter("weight", {num_channels}, options);
  bias = register_parameter("bias", {num_channels}, options);
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& x) {
  MG_CHECK(x.dim() >= 2 && x.size(1) == num_channels, ShapeError, "GroupNorm: expected input [N, ", num_channels,
           ", ...], got ", shape_str(x.shape()));
  return group_norm(x, num_groups, weight, bias, eps);
}

BatchNorm::BatchNorm(const char* type, std::vector<int64_t> dims, int64_t n, const BatchNormOptions& o,
                     const TensorOptions& to)
    : UnaryModule(type), num_features(n), options(o), dims_(std::move(dims)) {
  MG_CHECK(n > 0, ValueError, type, ": expected a positive number of features, got ", n);
  MG_CHECK(o.momentum_ >= 0 && o.momentum_ <= 1 && o.eps_ > 0, ValueError, type,
           ": expected momentum in [0, 1] and eps > 0, got ", o.momentum_, " and ", o.eps_);
  if (o.affine_) {
    weight = register_parameter("weight", {n}, to);
    bias = register_parameter("bias", {n}, to);
    init::ones_(weight);
    init::zeros_(bias);
  }
  if (o.track_running_stats_) {
    NoGradGuard ng;
    auto state = [this](const char* name, const std::function<Tensor()>& make) -> Tensor& {
      MemoryScope scope(Category::Other, name);  // the module's state, like the attention's mask
      return register_buffer(name, make());
    };
    running_mean = state("running_mean", [&] { return zeros({n}, to); });
    running_var = state("running_var", [&] { return ones({n}, to); });
    num_batches_tracked =
        state("num_batches_tracked", [&] { return zeros({}, TensorOptions(kInt64).device(to.device_)); });
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  MG_CHECK(std::find(dims_.begin(), dims_.end(), x.dim()) != dims_.end() && x.size(1) == num_features, ShapeError,
           type_name(), ": expected an input of ", dims_.size() == 1 ? "4" : "2 or 3", " dims with ", num_features,
           " channels in dim 1, got ", shape_str(x.shape()));
  const bool batch_stats = is_training() || !running_mean.defined();
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard ng;
    num_batches_tracked.add_(1);
  }
  return batch_norm(x, running_mean, running_var, weight, bias, batch_stats, options.momentum_, options.eps_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, const TensorOptions& options)
    : UnaryModule("Embedding") {
  weight = register_parameter("weight", {num_embeddings, embedding_dim}, options);
  init::normal_(weight);
}

Dropout::Dropout(double p) : UnaryModule("Dropout"), p(p) {
  MG_CHECK(p >= 0 && p <= 1, ValueError, "Dropout: expected a probability in [0, 1], got ", p);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : layers_) y = m->forward(y);
  return y;
}

MLP::MLP(int64_t n_embd, int64_t hidden, double dropout, GeluApprox approx, const TensorOptions& options)
    : UnaryModule("MLP") {
  c_fc = register_module<Linear>("c_fc", n_embd, hidden, true, options);
  act = register_module<GELU>("act", approx);
  c_proj = register_module<Linear>("c_proj", hidden, n_embd, true, options);
  drop = register_module<Dropout>("dropout", dropout);
}

Tensor MLP::hidden(const Tensor& x) {
  // c_fc's bias add runs inside the GELU (bias_gelu): one pass over the wide hidden tensor, not two.
  return c_fc->bias.defined() ? bias_gelu(linear(x, c_fc->weight), c_fc->bias, act->approx)
                              : act->forward(c_fc->forward(x));
}

Tensor MLP::forward(const Tensor& x) { return drop->forward(c_proj->forward(hidden(x))); }

Tensor MLP::forward_residual(const Tensor& x, const Tensor& residual) {
  if (!c_proj->bias.defined()) return residual + forward(x);
  return bias_dropout_add(linear(hidden(x), c_proj->weight), c_proj->bias, residual, drop->p, drop->is_training());
}

}  // namespace mg::nn
