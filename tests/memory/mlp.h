// A 3-layer MLP training step written with raw ops, shared by the memory tests. Every tensor
// size is a multiple of 512 B, so the ledger's rounded bytes equal numel x dtype size exactly.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <memgrad/memgrad.h>

namespace mlp {

constexpr int64_t kIn = 256, kHidden = 128, kClasses = 128;

struct Model {
  std::vector<std::pair<std::string, mg::Tensor>> params;  // fc1.weight, fc1.bias, ..., fc3.bias
};

inline Model make(const mg::Device& d) {
  Model m;
  const int64_t sizes[][2] = {{kHidden, kIn}, {kHidden, kHidden}, {kClasses, kHidden}};
  for (int l = 0; l < 3; ++l) {
    std::string layer = "fc" + std::to_string(l + 1);
    mg::MemoryScope scope(mg::Category::Parameter, layer);
    for (const char* what : {"weight", "bias"}) {
      mg::MemoryScope owner(what);
      mg::Shape shape = std::string(what) == "weight" ? mg::Shape{sizes[l][0], sizes[l][1]} : mg::Shape{sizes[l][0]};
      mg::Tensor p = mg::randn(shape, mg::TensorOptions().device(d));
      {
        mg::NoGradGuard ng;
        p.mul_(0.05);
      }
      m.params.emplace_back(layer + "." + what, p.requires_grad_());
    }
  }
  return m;
}

inline const mg::Tensor& param(const Model& m, int i) { return m.params[size_t(i)].second; }

// What the ledger said at the three moments of a step.
struct Marks {
  mg::MemoryStats start, after_forward, after_backward, after_update;
};

// One SGD-with-momentum step on a batch of `batch` rows; creates the model, the data and the
// optimizer state itself so the step starts from nothing.
inline Marks train_step(const mg::Device& d, int64_t batch) {
  Marks marks;
  marks.start = mg::memory_stats(d);
  Model m = make(d);
  mg::Tensor x = mg::randn({batch, kIn}, mg::TensorOptions().device(d));
  mg::Tensor target = mg::zeros({batch}, mg::TensorOptions().dtype(mg::kInt64).device(d));
  mg::annotate_memory("forward", d);
  mg::Tensor a1 = mg::relu(mg::linear(x, param(m, 0), param(m, 1)));
  mg::Tensor a2 = mg::relu(mg::linear(a1, param(m, 2), param(m, 3)));
  mg::Tensor loss = mg::cross_entropy(mg::linear(a2, param(m, 4), param(m, 5)), target);
  marks.after_forward = mg::memory_stats(d);
  mg::annotate_memory("backward", d);
  loss.backward();
  marks.after_backward = mg::memory_stats(d);
  mg::annotate_memory("optimizer", d);
  std::vector<mg::Tensor> momentum;
  {
    mg::NoGradGuard ng;
    for (auto& [name, p] : m.params) {
      {
        mg::MemoryScope scope(mg::Category::OptimizerState, name + ".momentum");
        momentum.push_back(mg::zeros_like(p));
      }
      momentum.back().mul_(0.9).add_(p.grad());
      p.add_(momentum.back(), -0.01);
    }
  }
  marks.after_update = mg::memory_stats(d);
  return marks;
}

}  // namespace mlp
