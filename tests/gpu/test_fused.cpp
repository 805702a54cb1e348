// Fused attention beyond its case list (tests/ops/cases_attention.cpp, run on cuda by
// "cuda: scaled_dot_product_attention matches the cpu"): heads split out of one [B, T, 3C] tensor,
// the head-dim limit, and a GPT step with fused attention booking the same bytes on both devices.
#include "gpu_util.h"

using namespace gpu_test;

TEST_CASE("cuda: scaled_dot_product_attention on heads taken out of [B, T, 3C] (non-contiguous)") {
  manual_seed(32);
  const int64_t B = 2, T = 130, H = 4, D = 24;
  Tensor x = randn({B, T, 3 * H * D});
  parity("attention from qkv", {x}, [&](const std::vector<Tensor>& in) {
    auto qkv = split(in[0], H * D, 2);
    auto heads = [&](const Tensor& s) { return s.view({B, T, H, D}).transpose(1, 2); };
    return scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true);
  });
}

TEST_CASE("cuda: scaled_dot_product_attention: head dims above 128 say so") {
  Tensor q = randn({1, 4, 130}).to(kGPU);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, q, q), NotImplementedError);
  Tensor ok = randn({1, 4, 128}).to(kGPU);
  CHECK(scaled_dot_product_attention(ok, ok, ok).shape() == ok.shape());  // still usable
}

TEST_CASE("cuda: a GPT step with fused attention: same loss, gradients and bytes as on the cpu") {
  auto step = [](const Device& dev) {
    manual_seed(4);
    nn::GPTConfig c;
    c.vocab_size = 96;
    c.block_size = 64;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 32;
    c.dropout = 0.1;
    c.fused_attention = true;
    c.options = TensorOptions().device(dev);
    nn::GPT gpt(c);
    Tensor idx = randint(0, 96, {4, 64}).to(dev), target = randint(0, 96, {4, 64}).to(dev);
    reset_peak(dev);
    const int64_t base = memory_stats(dev).allocated;
    Tensor loss = gpt.loss(idx, target);
    loss.backward();
    std::vector<Tensor> grads;
    for (auto& [name, p] : gpt.named_parameters()) grads.push_back(p.grad().to(kCPU));
    return std::tuple{loss.to(kCPU), grads, memory_stats(dev).peak_allocated - base};
  };
  auto [loss_c, grads_c, peak_c] = step(kCPU);
  auto [loss_g, grads_g, peak_g] = step(kGPU);
  expect_close(loss_g, loss_c, {1e-4, 1e-5}, "loss");
  for (size_t i = 0; i < grads_c.size(); ++i) expect_close(grads_g[i], grads_c[i], {1e-3, 1e-5}, "gradient");
  CHECK(peak_g == peak_c);
}
