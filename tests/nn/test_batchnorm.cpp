// BatchNorm1d/2d against PyTorch (tests/reference/make_nn_fixtures.py, nn_batchnorm.safetensors):
// training-mode output, gradients and running statistics, then eval mode; gradcheck in float64;
// and what it saves for backward on meta.
#include "fixtures.h"

using namespace mg;
using mg_test::get;

namespace {
const nn::StateDict& F() { return mg_test::fixture("nn_batchnorm.safetensors"); }

// One step in training mode and one in eval mode, each against PyTorch.
void check_case(nn::BatchNorm& bn, const std::string& name) {
  INFO("case ", name);
  if (bn.weight.defined()) {
    NoGradGuard ng;
    bn.weight.copy_(get(F(), name + ".weight"));
    bn.bias.copy_(get(F(), name + ".bias"));
  }
  for (const std::string mode : {"", "eval."}) {
    INFO("mode ", mode.empty() ? "train" : "eval");
    bn.train(mode.empty());
    bn.zero_grad();
    Tensor x = get(F(), name + "." + mode + "x").clone().requires_grad_();
    Tensor out = bn(x);
    CHECK_CLOSE(out, get(F(), name + "." + mode + "out"), 1e-5, 1e-5);
    (out * get(F(), name + "." + mode + "r")).sum().backward();
    CHECK_CLOSE(x.grad(), get(F(), name + "." + mode + "grad.x"), 1e-5, 1e-5);
    for (auto& [pname, p] : bn.named_parameters()) {
      INFO("parameter ", pname);
      CHECK_CLOSE(p.grad(), get(F(), name + "." + mode + "grad." + pname), 1e-5, 1e-5);
    }
    if (mode.empty()) {
      CHECK_CLOSE(bn.running_mean, get(F(), name + ".after.running_mean"), 1e-6, 1e-6);
      CHECK_CLOSE(bn.running_var, get(F(), name + ".after.running_var"), 1e-6, 1e-6);
      CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
    }
  }
}
}  // namespace

TEST_CASE("nn layers: BatchNorm1d and BatchNorm2d against PyTorch, training and eval") {
  nn::BatchNorm2d bn2d(3);
  check_case(bn2d, "bn2d");
  nn::BatchNorm1d bn1d(4, nn::BatchNormOptions().momentum(0.3));
  check_case(bn1d, "bn1d");
  nn::BatchNorm1d seq(4, nn::BatchNormOptions().eps(1e-3));
  check_case(seq, "bn1d_seq");
  nn::BatchNorm2d plain(2, nn::BatchNormOptions().affine(false));
  check_case(plain, "bn2d_noaffine");
  CHECK(plain.named_parameters().empty());
  // The buffers are the module's state: in state_dict, as PyTorch's.
  auto sd = bn2d.state_dict();
  for (const char* k : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}) CHECK(sd.count(k));
}

TEST_CASE("batch_norm: gradients match float64 finite differences, training and eval") {
  manual_seed(11);
  auto opts = TensorOptions(kFloat64);
  Tensor x = randn({3, 2, 4}, opts).requires_grad_(), w = randn({2}, opts).requires_grad_(),
         b = randn({2}, opts).requires_grad_();
  Tensor rm = randn({2}, opts), rv = rand({2}, opts) + 0.5;
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2]); },
                  {x, w, b}));
  CHECK(gradcheck(
      [&](const std::vector<Tensor>& in) { return batch_norm(in[0], rm, rv, in[1], in[2], /*training=*/false); },
      {x, w, b}));
}

TEST_CASE("batch_norm: checks its arguments, and the buffers it updates") {
  Tensor x = randn({4, 3, 2, 2}), rm = zeros({3}), rv = ones({3});
  CHECK_THROWS_AS(batch_norm(randn({4}), rm, rv), ShapeError);
  CHECK_THROWS_AS(batch_norm(x, zeros({2}), ones({2})), ShapeError);
  CHECK_THROWS_AS(batch_norm(x, rm, Tensor()), ValueError);
  CHECK_THROWS_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), /*training=*/false), ValueError);
  CHECK_THROWS_AS(batch_norm(randn({1, 3}), rm, rv), ValueError);  // one value per channel
  CHECK_THROWS_AS(batch_norm(x.to(kInt64), rm, rv), DTypeError);
  nn::BatchNorm2d bn(3);
  CHECK_THROWS_AS(bn(randn({4, 3, 5})), ShapeError);
  CHECK_THROWS_AS(bn(randn({4, 2, 5, 5})), ShapeError);
  CHECK_THROWS_AS(nn::BatchNorm1d(0), ValueError);
  // Two steps: running_mean = 0.9 * (0.9 * 0 + 0.1 m1) + 0.1 m2, per channel.
  Tensor a = randn({8, 3, 2, 2}), c = randn({8, 3, 2, 2});
  bn(a), bn(c);
  const Tensor expect = a.mean({0, 2, 3}) * 0.09 + c.mean({0, 2, 3}) * 0.1;
  CHECK(allclose(bn.running_mean, expect, 1e-5, 1e-6));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("batch_norm on meta: it saves its input and the per-channel statistics, nothing else") {
  // x [8, 16, 10, 10] float32: 51200 B saved (x), and mean and 1/std: 64 B each, 512 B rounded.
  nn::BatchNorm2d bn(16, {}, TensorOptions(kMeta));
  Tensor x = randn({8, 16, 10, 10}, TensorOptions(kMeta)).requires_grad_();
  const int64_t before = memory_stats(kMeta).category(Category::Activation);
  Tensor y = bn(x * 1.0);  // an op output, so that batch_norm's saving it moves it to Activation
  CHECK(memory_stats(kMeta).category(Category::Activation) - before == 51200 + 2 * 512);
  y.sum().backward();
  CHECK(memory_stats(kMeta).category(Category::Activation) == before);
  CHECK(bn.weight.grad().defined());
}
