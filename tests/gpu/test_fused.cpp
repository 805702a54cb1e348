// The fused kernels against the CPU's. Attention: every dtype, head dims around the 32-lane split,
// lengths around the 32-key tiles, causal or not, non-contiguous inputs, dropout with the same
// mask; a GPT step with fused attention booking the same bytes on both devices. bias_gelu: every
// dtype, both approximations, odd widths.
#include "gpu_util.h"

using namespace gpu_test;

namespace {
Tol attention_tol(DType t) {
  Tol base = tol_for(t);
  return t == kFloat32 ? Tol{1e-4, 1e-5} : Tol{base.rtol * 8, base.atol * 8};
}
}  // namespace

TEST_CASE("cuda: fused attention forward and backward match the cpu") {
  struct Case {
    int64_t Tq, Tk, D;
  };
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64})
    for (const Case& c :
         {Case{1, 1, 1}, Case{33, 33, 16}, Case{71, 71, 64}, Case{200, 200, 80}, Case{40, 97, 128}, Case{97, 40, 32}})
      for (bool causal : {true, false})
        for (double p : {0.0, 0.25}) {
          manual_seed(31);
          Tensor q = randn({2, 3, c.Tq, c.D}).to(t), k = randn({2, 3, c.Tk, c.D}).to(t),
                 v = randn({2, 3, c.Tk, c.D}).to(t);
          std::string name = std::string("attention ") + dtype_name(t) + " Tq=" + std::to_string(c.Tq) +
                             " Tk=" + std::to_string(c.Tk) + " D=" + std::to_string(c.D) + (causal ? " causal" : "") +
                             " p=" + std::to_string(p);
          parity(
              name, {q, k, v},
              [causal, p](const std::vector<Tensor>& in) {
                manual_seed(77);  // the same dropout counters on both devices
                return scaled_dot_product_attention(in[0], in[1], in[2], {}, p, causal);
              },
              true, attention_tol(t));
        }
}

TEST_CASE("cuda: fused attention with bool and additive masks and broadcast leading dims") {
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64})
    for (int64_t Tk : {1, 45, 97})
      for (double p : {0.0, 0.25}) {
        manual_seed(33);
        const int64_t B = 2, H = 3, Tq = 70, D = 40;
        Tensor q = randn({B, H, Tq, D}).to(t), k = randn({B, 1, Tk, D}).to(t), v = randn({B, 1, Tk, D}).to(t);
        Tensor keep = rand({B, 1, Tq, Tk}) > 0.3;
        keep.select(0, 1).select(0, 0).select(0, 3).zero_();  // a query that sees no key
        Tensor add = randn({H, Tq, Tk});
        add.masked_fill_(rand({H, Tq, Tk}) < 0.2, -INFINITY);
        std::string name =
            std::string("attention mask ") + dtype_name(t) + " Tk=" + std::to_string(Tk) + " p=" + std::to_string(p);
        for (const Tensor& mask : {keep, add.to(t)})
          parity(
              name + (mask.dtype() == kBool ? " bool" : " additive"), {q, k, v},
              [p, mask](const std::vector<Tensor>& in) {
                manual_seed(78);
                return scaled_dot_product_attention(in[0], in[1], in[2], mask.to(in[0].device()), p);
              },
              true, attention_tol(t));
      }
}

TEST_CASE("cuda: fused attention on heads taken out of [B, T, 3C] (non-contiguous)") {
  manual_seed(32);
  const int64_t B = 2, T = 130, H = 4, D = 24;
  Tensor x = randn({B, T, 3 * H * D});
  parity("attention from qkv", {x}, [&](const std::vector<Tensor>& in) {
    auto qkv = split(in[0], H * D, 2);
    auto heads = [&](const Tensor& s) { return s.view({B, T, H, D}).transpose(1, 2); };
    return scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {}, 0.0, true);
  });
}

TEST_CASE("cuda: head dims above 128 say so") {
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

TEST_CASE("cuda: bias_gelu forward and backward match the cpu") {
  manual_seed(33);
  for (DType t : {kFloat32, kFloat16, kBFloat16})
    for (int64_t n : {1, 7, 768, 3073})
      for (GeluApprox approx : {GeluApprox::None, GeluApprox::Tanh}) {
        Tensor x = randn({5, n}).to(t), b = randn({n}).to(t);
        parity(std::string("bias_gelu ") + dtype_name(t) + " n=" + std::to_string(n), {x, b},
               [approx](const std::vector<Tensor>& in) { return bias_gelu(in[0], in[1], approx); });
      }
}
