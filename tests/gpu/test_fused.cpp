// Fused attention beyond its case list (tests/ops/cases_attention.cpp, run on cuda by
// "cuda: scaled_dot_product_attention matches the cpu"): heads split out of one [B, T, 3C] tensor,
// the tensor-core variant on GPT-2's head shapes, the head-dim limit, and a GPT step with fused attention booking the
// same bytes on both devices.
#include "gpu_util.h"

using namespace gpu_test;

TEST_CASE("cuda: scaled_dot_product_attention on heads taken out of [B, T, 3C] (non-contiguous)") {
  manual_seed(32);
  const int64_t B = 2, T = 130, H = 4, D = 24;
  Tensor x = randn({B, T, 3 * H * D});
  parity("attention from qkv", {x}, [&](const std::vector<Tensor>& in) {
    auto qkv = split(in[0], H * D, 2);
    auto heads = [&](const Tensor& s) { return s.view({B, T, H, D}).transpose(1, 2); };
    return scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {}, 0.0, true);
  });
}

// The tensor-core variant on the shapes it was written for: GPT-2's heads (64) and 128, lengths
// that end inside a 64-row tile, causal and not. Each variant against the cpu (float32 math on the
// same 16-bit inputs), and the two variants against each other.
TEST_CASE("cuda: attention's mma and simt variants on 16-bit heads of 64 and 128") {
  REQUIRE(cuda::kernel_variants("attention") == std::vector<std::string>{"mma", "simt"});
  struct Shape4 {
    int64_t B, H, T, D;
    bool causal;
    DType dtype;
  };
  for (const Shape4& s : {Shape4{2, 3, 200, 64, true, kBFloat16}, Shape4{1, 2, 130, 128, false, kFloat16},
                          Shape4{1, 2, 77, 64, false, kBFloat16}, Shape4{2, 2, 64, 128, true, kBFloat16}}) {
    manual_seed(uint64_t(s.T + s.D));
    std::vector<Tensor> in;
    for (int i = 0; i < 3; ++i) in.push_back(randn_as({s.B, s.H, s.T, s.D}, s.dtype, 1.5));
    const std::string name = "T " + std::to_string(s.T) + ", D " + std::to_string(s.D) + (s.causal ? ", causal" : "");
    std::vector<Tensor> outs;
    for (const char* variant : {"mma", "simt"}) {
      cuda::set_kernel_variant("attention", variant);
      const Tol tol{tol_for(s.dtype).rtol * 8, tol_for(s.dtype).atol * 8};
      parity(
          std::string(variant) + ": " + name, in,
          [&](const std::vector<Tensor>& x) {
            // the cpu reference in float32 (its 16-bit kernels round as the simt variant does)
            if (x[0].device().is_cpu()) {
              std::vector<Tensor> w;
              for (const Tensor& t : x) w.push_back(t.to(kFloat32));
              return scaled_dot_product_attention(w[0], w[1], w[2], {}, 0.0, s.causal).to(s.dtype);
            }
            return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, s.causal);
          },
          true, tol);
      NoGradGuard no_grad;
      outs.push_back(scaled_dot_product_attention(in[0].to(kGPU), in[1].to(kGPU), in[2].to(kGPU), {}, 0.0, s.causal));
    }
    cuda::set_kernel_variant("attention", "mma");
    expect_close(outs[0].to(kCPU), outs[1].to(kCPU), {tol_for(s.dtype).rtol * 8, tol_for(s.dtype).atol * 8},
                 name + ": mma against simt");
  }
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
