// Every layer's forward and gradients against PyTorch (tests/reference/make_nn_fixtures.py).
#include "fixtures.h"

using namespace mg;
using mg_test::get;

namespace {
const nn::StateDict& F() { return mg_test::fixture("nn_layers.safetensors"); }

// Loads the case's parameters, runs forward on its x, backward of (out * r).sum(), compares all.
void check_case(nn::UnaryModule& m, const std::string& name, bool grad_input = true, double tol = 1e-5) {
  INFO("case ", name);
  m.load_state_dict(mg_test::params_of(F(), name));
  Tensor x = get(F(), name + ".x").clone();
  if (grad_input) x.requires_grad_();
  Tensor out = m(x);
  CHECK_CLOSE(out, get(F(), name + ".out"), tol, tol);
  (out * get(F(), name + ".r")).sum().backward();
  if (grad_input) CHECK_CLOSE(x.grad(), get(F(), name + ".grad.x"), tol, tol);
  for (auto& [pname, p] : m.named_parameters()) {
    INFO("parameter ", pname);
    REQUIRE(p.grad().defined());
    CHECK_CLOSE(p.grad(), get(F(), name + ".grad." + pname), tol, tol);
  }
}
}  // namespace

TEST_CASE("nn layers: Linear") {
  nn::Linear a(5, 3), b(6, 2, false);
  check_case(a, "linear");
  check_case(b, "linear_nobias");
  CHECK_FALSE(b.bias.defined());
}

TEST_CASE("nn layers: Conv2d with groups, dilation, depthwise") {
  nn::Conv2d conv(4, 6, {3}, nn::Conv2dOptions().stride({2}).padding({1}).groups(2));
  check_case(conv, "conv");
  nn::Conv2d dilated(3, 2, {3, 2}, nn::Conv2dOptions().padding({2, 1}).dilation({2}));
  check_case(dilated, "conv_dilated");
  nn::Conv2d depthwise(4, 4, {3}, nn::Conv2dOptions().padding({1}).groups(4).bias(false));
  check_case(depthwise, "depthwise");
  CHECK(depthwise.weight.shape() == Shape{4, 1, 3, 3});
}

TEST_CASE("nn layers: activations") {
  nn::ReLU relu;
  nn::GELU gelu, gelu_tanh(GeluApprox::Tanh);
  nn::SiLU silu;
  check_case(relu, "relu");
  check_case(gelu, "gelu");
  check_case(gelu_tanh, "gelu_tanh");
  check_case(silu, "silu");
}

TEST_CASE("nn layers: LayerNorm, Embedding, pooling, Flatten") {
  nn::LayerNorm ln({6});
  check_case(ln, "layernorm");
  nn::Embedding emb(10, 4);
  check_case(emb, "embedding", false);
  nn::MaxPool2d mp({2}), mp_pad({3}, {2}, {1});
  check_case(mp, "maxpool");
  check_case(mp_pad, "maxpool_pad");
  nn::AvgPool2d ap({3}, {2}, {1});
  check_case(ap, "avgpool");
  nn::Flatten flat;
  check_case(flat, "flatten");
}

// Its op, group_norm, is checked against PyTorch in the case list (tests/ops/cases_norm.cpp).
TEST_CASE("nn layers: GroupNorm books its affine parameters and runs group_norm") {
  const int64_t before = memory_stats().category(Category::Parameter), requested = memory_stats().requested;
  nn::GroupNorm gn(3, 6);
  CHECK(memory_stats().category(Category::Parameter) - before == 2 * 512);  // two [6] float32 blocks
  CHECK(memory_stats().requested - requested == 2 * 6 * 4);
  auto named = gn.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[1].first == "bias");
  CHECK(gn.weight.to_vector<float>() == std::vector<float>(6, 1.f));
  CHECK(gn.bias.to_vector<float>() == std::vector<float>(6, 0.f));
  manual_seed(5);
  nn::init::uniform_(gn.weight, 0.5, 1.5);
  nn::init::uniform_(gn.bias, -1, 1);
  Tensor x = randn({2, 6, 4, 3});
  CHECK(allclose(gn(x), group_norm(x, 3, gn.weight, gn.bias, 1e-5), 0, 0));
  nn::GroupNorm plain(2, 4, 1e-3, false);
  CHECK(plain.parameters().empty());
  Tensor y = randn({3, 4, 5});
  CHECK(allclose(plain(y), group_norm(y, 2, {}, {}, 1e-3), 0, 0));
  CHECK_THROWS_AS(plain(randn({3, 6, 5})), ShapeError);  // channels other than num_channels
  CHECK_THROWS_AS(nn::GroupNorm(4, 6), ValueError);      // 6 channels in 4 groups
}

TEST_CASE("nn layers: Sequential, MLP, CausalSelfAttention, Block") {
  nn::Sequential seq;
  seq.emplace_back<nn::Linear>(4, 8);
  seq.emplace_back<nn::ReLU>();
  seq.emplace_back<nn::Linear>(8, 3);
  check_case(seq, "sequential");
  CHECK(seq.named_parameters().front().first == "0.weight");
  nn::MLP mlp(8, 32);
  check_case(mlp, "mlp");
  nn::CausalSelfAttention attn(8, 2, 6);
  check_case(attn, "attn", true, 2e-5);
  nn::GPTConfig c;
  c.n_embd = 8, c.n_head = 2, c.block_size = 6;
  nn::Block block(c);
  check_case(block, "block", true, 2e-5);
}

TEST_CASE("nn layers: causal attention ignores the future") {
  manual_seed(3);
  nn::CausalSelfAttention attn(8, 2, 6);
  Tensor x = randn({1, 5, 8});
  Tensor y = attn(x);
  Tensor x2 = x.clone();
  x2.narrow(1, 3, 2).fill_(7.0);  // change positions 3 and 4 only
  Tensor y2 = attn(x2);
  CHECK(allclose(y.narrow(1, 0, 3), y2.narrow(1, 0, 3), 1e-6, 1e-7));
  CHECK_FALSE(allclose(y.narrow(1, 3, 2), y2.narrow(1, 3, 2)));
}

TEST_CASE("nn losses: cross_entropy and mse against PyTorch") {
  Tensor logits = get(F(), "ce.x").clone().requires_grad_();
  Tensor loss = nn::CrossEntropyLoss{}(logits, get(F(), "ce.target"));
  CHECK_CLOSE(loss, get(F(), "ce.out"), 1e-6, 1e-7);
  loss.backward();
  CHECK_CLOSE(logits.grad(), get(F(), "ce.grad.x"), 1e-5, 1e-7);
  Tensor a = get(F(), "mse.x").clone().requires_grad_();
  Tensor l2 = nn::MSELoss{}(a, get(F(), "mse.target"));
  CHECK_CLOSE(l2, get(F(), "mse.out"), 1e-6, 1e-7);
  l2.backward();
  CHECK_CLOSE(a.grad(), get(F(), "mse.grad.x"), 1e-5, 1e-7);
}

TEST_CASE("nn layers: Dropout is active in training only") {
  nn::Dropout drop(0.5);
  Tensor x = ones({1000});
  Tensor y = drop(x);
  auto v = y.to_vector<float>();
  int64_t kept = 0;
  for (float e : v) {
    CHECK((e == 0.0f || e == 2.0f));
    kept += e != 0;
  }
  CHECK(kept > 400);
  CHECK(kept < 600);
  drop.eval();
  CHECK(drop(x).is_same(x));
}
