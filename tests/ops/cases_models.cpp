// Small models as extra cases: many ops in one graph, each with a cross-entropy loss. Inputs: x,
// target, then each layer's weight and bias (PyTorch's default init ranges); only the loss gets an
// upstream gradient. On cuda, in float32 and float64, the errors of the layers add up: within 50
// units in the last place.
#include <cmath>

#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {
// A layer's weight and bias, uniform in +-1/sqrt(fan_in).
std::vector<Input> layer(const Shape& weight, int64_t fan_in) {
  const double bound = 1 / std::sqrt(double(fan_in));
  return {U(weight, -bound, bound), U({weight[0]}, -bound, bound)};
}
std::vector<Input> join(std::vector<std::vector<Input>> parts) {
  std::vector<Input> all;
  for (auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}
}  // namespace

MG_OP_CASES(mlp) {  // 7 -> 13 -> 5
  call([](const Tensors& x, const Args&) {
    Tensor logits = mg::linear(mg::relu(mg::linear(x[0], x[2], x[3])), x[4], x[5]);
    return Tensors{logits, mg::cross_entropy(logits, x[1])};
  });
  defaults().only({kFloat32, kFloat64}).cuda_tolerance(50);
  add_case("mlp", join({{U({6, 7}).no_grad(), Ints({6}, 0, 5)}, layer({13, 7}, 7), layer({5, 13}, 13)})).grad_of({1});
}

MG_OP_CASES(convnet) {  // conv, relu, max pool, grouped conv, relu, avg pool, linear
  call([](const Tensors& x, const Args&) {
    Tensor h = mg::max_pool2d(mg::relu(mg::conv2d(x[0], x[2], x[3], {1, 1}, {1, 1})), {2, 2});
    h = mg::avg_pool2d(mg::relu(mg::conv2d(h, x[4], x[5], {1, 1}, {0, 0}, {1, 1}, 2)), {2, 2});
    Tensor logits = mg::linear(h.flatten(1), x[6], x[7]);
    return Tensors{logits, mg::cross_entropy(logits, x[1])};
  });
  variants_of({"conv2d"});
  defaults().only({kFloat32, kFloat64}).cuda_tolerance(50);
  add_case("convnet", join({{U({3, 3, 11, 10}).no_grad(), Ints({3}, 0, 3)},
                            layer({4, 3, 3, 3}, 27),
                            layer({6, 2, 3, 3}, 18),
                            layer({3, 6}, 6)}))
      .grad_of({1});
}
