// Layers, close to libtorch's C++ frontend: `mg::nn::Linear fc(784, 10); Tensor y = fc(x);`.
// Constructors take optional TensorOptions (device, dtype) for their parameters, so a model can
// be built straight on the meta device. Parameters are initialised as PyTorch initialises them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <memgrad/nn/module.h>
#include <memgrad/ops/ops.h>

namespace mg::nn {

// y = x W^T + b; weight [out, in], bias [out].
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, const TensorOptions& options = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;  // bias undefined when built without one
};

struct Conv2dOptions {
  std::vector<int64_t> stride_{1, 1}, padding_{0, 0}, dilation_{1, 1};
  int64_t groups_ = 1;
  bool bias_ = true;
  Conv2dOptions& stride(std::vector<int64_t> v) { return stride_ = std::move(v), *this; }
  Conv2dOptions& padding(std::vector<int64_t> v) { return padding_ = std::move(v), *this; }
  Conv2dOptions& dilation(std::vector<int64_t> v) { return dilation_ = std::move(v), *this; }
  Conv2dOptions& groups(int64_t g) { return groups_ = g, *this; }  // groups == in == out: depthwise
  Conv2dOptions& bias(bool b) { return bias_ = b, *this; }
};

// input [N, C, H, W]; weight [out, in / groups, kH, kW].
class Conv2d : public UnaryModule {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size, const Conv2dOptions& conv = {},
         const TensorOptions& options = {});
  Tensor forward(const Tensor& x) override;
  Conv2dOptions conv;
  Tensor weight, bias;
};

class ReLU : public UnaryModule {
 public:
  ReLU() : UnaryModule("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public UnaryModule {
 public:
  explicit GELU(GeluApprox approx = GeluApprox::None) : UnaryModule("GELU"), approx(approx) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approx); }
  GeluApprox approx;
};

class SiLU : public UnaryModule {
 public:
  SiLU() : UnaryModule("SiLU") {}
  Tensor forward(const Tensor& x) override { return silu(x); }
};

// Normalises over the trailing `normalized_shape` dims; affine weight 1 and bias 0 at start.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     const TensorOptions& options = {});
  Tensor forward(const Tensor& x) override;
  Shape normalized_shape;
  double eps;
  Tensor weight, bias;
};

// Group normalisation (Wu and He): the channels of input [N, C, ...] in num_groups groups, each
// normalised over its channels and positions; affine weight 1 and bias 0 per channel at start.
class GroupNorm : public UnaryModule {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true,
            const TensorOptions& options = {});
  Tensor forward(const Tensor& x) override;
  int64_t num_groups, num_channels;
  double eps;
  Tensor weight, bias;  // undefined without affine
};

// Batch normalization over channel dim 1 (Ioffe & Szegedy 2015), as PyTorch's BatchNorm1d/2d.
// Training mode normalizes with the batch's statistics and, with track_running_stats, updates the
// buffers running_mean (zeros at start), running_var (ones) with `momentum` and counts
// num_batches_tracked; eval mode normalizes with the running statistics. Affine weight 1 and bias 0
// at start. BatchNorm1d takes [N, C] or [N, C, L], BatchNorm2d [N, C, H, W].
struct BatchNormOptions {
  double eps_ = 1e-5, momentum_ = 0.1;
  bool affine_ = true, track_running_stats_ = true;
  BatchNormOptions& eps(double v) { return eps_ = v, *this; }
  BatchNormOptions& momentum(double v) { return momentum_ = v, *this; }
  BatchNormOptions& affine(bool v) { return affine_ = v, *this; }
  BatchNormOptions& track_running_stats(bool v) { return track_running_stats_ = v, *this; }
};
class BatchNorm : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;                                    // undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // undefined without track_running_stats

 protected:
  BatchNorm(const char* type, std::vector<int64_t> dims, int64_t num_features, const BatchNormOptions& o,
            const TensorOptions& options);

 private:
  std::vector<int64_t> dims_;  // the input ranks it takes
};
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, const BatchNormOptions& o = {}, const TensorOptions& options = {})
      : BatchNorm("BatchNorm1d", {2, 3}, num_features, o, options) {}
};
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNormOptions& o = {}, const TensorOptions& options = {})
      : BatchNorm("BatchNorm2d", {4}, num_features, o, options) {}
};

// Looks up rows of weight [num_embeddings, embedding_dim] (initialised N(0, 1)) by int64 index.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, const TensorOptions& options = {});
  Tensor forward(const Tensor& indices) override { return embedding(weight, indices); }
  Tensor weight;
};

// Active in training mode only.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  double p;
};

class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(std::vector<int64_t> kernel, std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0})
      : UnaryModule("MaxPool2d"), kernel(std::move(kernel)), stride(std::move(stride)), padding(std::move(padding)) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel, stride, padding); }
  std::vector<int64_t> kernel, stride, padding;
};

class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(std::vector<int64_t> kernel, std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0})
      : UnaryModule("AvgPool2d"), kernel(std::move(kernel)), stride(std::move(stride)), padding(std::move(padding)) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel, stride, padding); }
  std::vector<int64_t> kernel, stride, padding;
};

class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : UnaryModule("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  int64_t start_dim, end_dim;
};

// Runs its children in order; they are named "0", "1", ...
class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  // Builds the child in place (under its index as owner label) and appends it.
  template <class M, class... Args>
  std::shared_ptr<M> emplace_back(Args&&... args) {
    auto m = register_module<M>(std::to_string(layers_.size()), std::forward<Args>(args)...);
    layers_.push_back(m);
    return m;
  }
  void push_back(std::shared_ptr<UnaryModule> m) {
    register_module(std::to_string(layers_.size()), m);
    layers_.push_back(std::move(m));
  }
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<UnaryModule>& operator[](size_t i) const { return layers_.at(i); }

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

// A list of modules named "0", "1", ... with no forward of its own.
template <class M = Module>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <class... Args>
  std::shared_ptr<M> emplace_back(Args&&... args) {
    auto m = register_module<M>(std::to_string(items_.size()), std::forward<Args>(args)...);
    items_.push_back(m);
    return m;
  }
  void push_back(std::shared_ptr<M> m) {
    register_module(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  size_t size() const { return items_.size(); }
  M& operator[](size_t i) const { return *items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

// The transformer feed-forward block: c_fc (n -> hidden), GELU, c_proj (hidden -> n), dropout.
class MLP : public UnaryModule {
 public:
  MLP(int64_t n_embd, int64_t hidden, double dropout = 0.0, GeluApprox approx = GeluApprox::Tanh,
      const TensorOptions& options = {});
  Tensor forward(const Tensor& x) override;
  // residual + forward(x), with c_proj's bias add, the dropout and the residual add in one pass
  // (bias_dropout_add): the same values and dropout mask as the composed ops.
  Tensor forward_residual(const Tensor& x, const Tensor& residual);
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<GELU> act;
  std::shared_ptr<Dropout> drop;

 private:
  Tensor hidden(const Tensor& x);  // gelu(c_fc(x))
};

}  // namespace mg::nn
