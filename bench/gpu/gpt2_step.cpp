// A GPT-2-124M-shaped training step on the GPU (12 layers, 12 heads, width 768, vocabulary
// 50257), written with memgrad's ops: forward, backward, SGD update. Prints time per step,
// tokens/s and the ledger's peak with its breakdown. gpt2_step.py runs the same model in PyTorch.
// --fused-attention replaces the explicit masked softmax with scaled_dot_product_attention.
//   bench_gpu_gpt2 [--batch 8] [--seq 1024] [--steps 10] [--tf32] [--fused-attention]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

using namespace mg;

namespace {
const Device kGPU = cuda_device(0);
constexpr int64_t kLayers = 12, kHeads = 12, kWidth = 768, kVocab = 50257, kContext = 1024;
bool g_fused = false;

struct Block {
  Tensor ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, out_w, out_b;
};
struct Model {
  Tensor wte, wpe, lnf_w, lnf_b;
  std::vector<Block> blocks;
  std::vector<Tensor*> params() {
    std::vector<Tensor*> p = {&wte, &wpe, &lnf_w, &lnf_b};
    for (auto& b : blocks)
      for (Tensor* t : {&b.ln1_w, &b.ln1_b, &b.attn_w, &b.attn_b, &b.proj_w, &b.proj_b, &b.ln2_w, &b.ln2_b, &b.fc_w,
                        &b.fc_b, &b.out_w, &b.out_b})
        p.push_back(t);
    return p;
  }
};

Tensor param(const Shape& s, double std) {
  MemoryScope scope(Category::Parameter);
  Tensor t = std == 0 ? zeros(s, kGPU) : std < 0 ? ones(s, kGPU) : randn(s, kGPU) * std;
  return t.detach().requires_grad_();
}

Model make_model() {
  Model m;
  m.wte = param({kVocab, kWidth}, 0.02);
  m.wpe = param({kContext, kWidth}, 0.01);
  m.lnf_w = param({kWidth}, -1);
  m.lnf_b = param({kWidth}, 0);
  const double proj_std = 0.02 / std::sqrt(2.0 * kLayers);
  for (int64_t l = 0; l < kLayers; ++l)
    m.blocks.push_back({param({kWidth}, -1), param({kWidth}, 0), param({3 * kWidth, kWidth}, 0.02),
                        param({3 * kWidth}, 0), param({kWidth, kWidth}, proj_std), param({kWidth}, 0),
                        param({kWidth}, -1), param({kWidth}, 0), param({4 * kWidth, kWidth}, 0.02),
                        param({4 * kWidth}, 0), param({kWidth, 4 * kWidth}, proj_std), param({kWidth}, 0)});
  return m;
}

Tensor forward(Model& m, const Tensor& idx, const Tensor& targets, const Tensor& mask) {
  const int64_t B = idx.size(0), T = idx.size(1), hd = kWidth / kHeads;
  Tensor pos = arange(0, T, 1, TensorOptions(kInt64).device(kGPU));
  Tensor x = embedding(m.wte, idx) + embedding(m.wpe, pos);
  for (Block& b : m.blocks) {
    Tensor h = layer_norm(x, {kWidth}, b.ln1_w, b.ln1_b);
    auto qkv = split(linear(h, b.attn_w, b.attn_b), kWidth, 2);
    auto heads = [&](const Tensor& t) { return t.view({B, T, kHeads, hd}).transpose(1, 2); };
    Tensor y;
    if (g_fused) {
      y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {}, 0.0, true);
    } else {
      Tensor att = matmul(heads(qkv[0]), heads(qkv[1]).transpose(-1, -2)) * (1.0 / std::sqrt(double(hd)));
      y = matmul(softmax(masked_fill(att, mask, -INFINITY), -1), heads(qkv[2]));
    }
    y = y.transpose(1, 2).reshape({B, T, kWidth});
    x = x + linear(y, b.proj_w, b.proj_b);
    h = gelu(linear(layer_norm(x, {kWidth}, b.ln2_w, b.ln2_b), b.fc_w, b.fc_b), GeluApprox::Tanh);
    x = x + linear(h, b.out_w, b.out_b);
  }
  Tensor logits = linear(layer_norm(x, {kWidth}, m.lnf_w, m.lnf_b), m.wte);
  return cross_entropy(logits.view({B * T, kVocab}), targets.view({B * T}));
}
}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 8, seq = 1024, steps = 10;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--seq") && i + 1 < argc)
      seq = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--tf32"))
      cuda::set_allow_tf32(true);
    else if (!std::strcmp(argv[i], "--fused-attention"))
      g_fused = true;
  }
  if (!cuda_available()) {
    std::printf("bench_gpu_gpt2: no CUDA device\n");
    return 77;
  }
  manual_seed(0);
  Model m = make_model();
  Tensor idx, targets, mask;
  {
    MemoryScope scope(Category::Input);
    idx = randint(0, kVocab, {batch, seq}, TensorOptions(kInt64).device(kGPU));
    targets = randint(0, kVocab, {batch, seq}, TensorOptions(kInt64).device(kGPU));
    Tensor r = arange(0, seq, 1, TensorOptions(kInt64).device(kGPU));
    mask = gt(r.unsqueeze(0), r.unsqueeze(1));  // key after query
  }
  const double lr = 1e-4;
  double total_ms = 0, first_loss = 0, last_loss = 0;
  reset_peak(kGPU);
  for (int64_t s = 0; s < steps + 1; ++s) {
    cuda::synchronize();
    auto t0 = std::chrono::steady_clock::now();
    Tensor loss = forward(m, idx, targets, mask);
    loss.backward();
    {
      NoGradGuard ng;
      for (Tensor* p : m.params()) {
        p->add_(p->grad(), -lr);
        p->set_grad(Tensor());
      }
    }
    double l = loss.to(kCPU).item<double>();  // synchronises
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s == 0)
      first_loss = l;  // step 0 warms up (cuBLAS heuristics, first allocations)
    else
      total_ms += ms;
    last_loss = l;
  }
  MemoryStats st = memory_stats(kGPU);
  const double ms = total_ms / double(steps);
  std::printf("memgrad gpt2-124M step: batch %lld, seq %lld, tf32 %s, %s attention\n", (long long)batch, (long long)seq,
              cuda::allow_tf32() ? "on" : "off", g_fused ? "fused" : "explicit");
  std::printf("  %.1f ms/step, %.0f tokens/s, loss %.4f -> %.4f\n", ms, double(batch * seq) / ms * 1e3, first_loss,
              last_loss);
  std::printf("  peak allocated %.1f MiB; at peak:", double(st.peak_allocated) / (1 << 20));
  for (int c = 0; c < kNumCategories; ++c)
    if (st.at_peak_by_category[size_t(c)])
      std::printf(" %s %.1f MiB", category_name(Category(c)), double(st.at_peak_by_category[size_t(c)]) / (1 << 20));
  auto dm = cuda::device_memory(0);
  std::printf("\n  device used %.1f MiB, of which outside memgrad (context, cuBLAS) %.1f MiB\n",
              double(dm.used) / (1 << 20), double(dm.outside_memgrad) / (1 << 20));
  return 0;
}
