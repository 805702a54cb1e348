// A user's own model, as the planner sees one: a residual ConvNet with BatchNorm (a stem, a chain of
// residual blocks in an nn::Sequential, a pooled linear head) and its training program, which
// builds the model on the device the planner gives it and runs the blocks through train::run_chain
// (so the planner can checkpoint them). Shared by examples/plan_convnet.cpp and tests/plan.
#pragma once
#include <functional>
#include <memory>
#include <tuple>
#include <utility>

#include <memgrad/memgrad.h>

namespace convnet {

// x + bn2(conv2(relu(bn1(conv1(x))))), then relu; 3x3 convolutions keep the size.
class Residual : public mg::nn::UnaryModule {
 public:
  Residual(int64_t c, const mg::TensorOptions& o) : UnaryModule("Residual") {
    const auto conv = mg::nn::Conv2dOptions().padding({1}).bias(false);
    conv1 = register_module<mg::nn::Conv2d>("conv1", c, c, std::vector<int64_t>{3}, conv, o);
    bn1 = register_module<mg::nn::BatchNorm2d>("bn1", c, mg::nn::BatchNormOptions(), o);
    conv2 = register_module<mg::nn::Conv2d>("conv2", c, c, std::vector<int64_t>{3}, conv, o);
    bn2 = register_module<mg::nn::BatchNorm2d>("bn2", c, mg::nn::BatchNormOptions(), o);
  }
  mg::Tensor forward(const mg::Tensor& x) override {
    return mg::relu(x + bn2->forward(conv2->forward(mg::relu(bn1->forward(conv1->forward(x))))));
  }
  std::shared_ptr<mg::nn::Conv2d> conv1, conv2;
  std::shared_ptr<mg::nn::BatchNorm2d> bn1, bn2;
};

class ConvNet : public mg::nn::Module {
 public:
  ConvNet(int64_t channels, int64_t blocks, int64_t classes, const mg::TensorOptions& o) : Module("ConvNet") {
    stem = register_module<mg::nn::Conv2d>("stem", 3, channels, std::vector<int64_t>{3},
                                           mg::nn::Conv2dOptions().padding({1}), o);
    stem_bn = register_module<mg::nn::BatchNorm2d>("stem_bn", channels, mg::nn::BatchNormOptions(), o);
    body = register_module<mg::nn::Sequential>("body");
    for (int64_t i = 0; i < blocks; ++i) {
      mg::MemoryScope scope("body." + std::to_string(i));  // the parameters' owner labels
      body->push_back(std::make_shared<Residual>(channels, o));
    }
    fc = register_module<mg::nn::Linear>("fc", channels, classes, true, o);
  }
  mg::Tensor head(const mg::Tensor& x) const { return mg::relu(stem_bn->forward(stem->forward(x))); }
  mg::Tensor tail(const mg::Tensor& x) const { return fc->forward(x.mean({2, 3})); }
  std::shared_ptr<mg::nn::Conv2d> stem;
  std::shared_ptr<mg::nn::BatchNorm2d> stem_bn;
  std::shared_ptr<mg::nn::Sequential> body;
  std::shared_ptr<mg::nn::Linear> fc;
};

// A micro-batch: float32 images [batch, 3, size, size] and int64 labels [batch], made on `device`.
using Data = std::function<std::pair<mg::Tensor, mg::Tensor>(int64_t batch, int64_t size, const mg::Device& device)>;
// What a plan feeds: zeros (meta has no values anyway).
inline std::pair<mg::Tensor, mg::Tensor> zero_data(int64_t batch, int64_t size, const mg::Device& device) {
  return {mg::zeros({batch, 3, size, size}, device), mg::zeros({batch}, mg::TensorOptions(mg::kInt64).device(device))};
}

// The training program: the ConvNet and a train::Trainer (its precision mode) built on ctx.device;
// each step takes fresh micro-batches from `data` (images converted to the model's dtype) and
// minimises the float32 cross-entropy over 4 classes. `loss`, when given, receives each step's loss.
inline mg::plan::Program program(int64_t channels, int64_t blocks, int64_t size, const mg::train::StepOptions& step,
                                 const Data& data = zero_data, std::shared_ptr<double> loss = nullptr) {
  return [=](const mg::plan::StepContext& ctx) -> mg::plan::Step {
    auto net = std::make_shared<ConvNet>(channels, blocks, 4, mg::TensorOptions(ctx.device));
    auto trainer = std::make_shared<mg::train::Trainer>(*net, step);
    const mg::train::Chain chain = mg::train::chain_of(*net->body);
    return [=] {
      mg::Tensor x, y;  // live until the next micro-batch replaces them
      const double l = trainer->step([&](int64_t) {
        std::tie(x, y) = data(ctx.batch, size, ctx.device);
        x = x.to(net->fc->weight.dtype());
        return mg::cross_entropy(net->tail(mg::train::run_chain(chain, net->head(x), ctx.policy)).to(mg::kFloat32), y);
      });
      if (loss) *loss = l;
    };
  };
}

}  // namespace convnet
