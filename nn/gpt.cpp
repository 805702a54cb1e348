#include <memgrad/nn/gpt.h>

#include <cmath>

#include <memgrad/autograd/checkpoint.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/nn/init.h>
#include <memgrad/nn/loss.h>

namespace mg::nn {

CausalSelfAttention::CausalSelfAttention(int64_t n_embd, int64_t n_head, int64_t block_size, double dropout,
                                         const TensorOptions& options)
    : UnaryModule("CausalSelfAttention"), n_embd(n_embd), n_head(n_head) {
  MG_CHECK(n_head > 0 && n_embd % n_head == 0, ValueError, "CausalSelfAttention: expected n_embd ", n_embd,
           " divisible by n_head ", n_head);
  c_attn = register_module<Linear>("c_attn", n_embd, 3 * n_embd, true, options);
  c_proj = register_module<Linear>("c_proj", n_embd, n_embd, true, options);
  attn_dropout = register_module<Dropout>("attn_dropout", dropout);
  resid_dropout = register_module<Dropout>("resid_dropout", dropout);
  NoGradGuard ng;
  MemoryScope scope(Category::Other, "mask");  // a constant, built once
  mask = gt(triu(ones({block_size, block_size}, TensorOptions(options.device_)), 1), 0.0);
  register_buffer("mask", mask, /*persistent=*/false);
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  MG_CHECK(x.dim() == 3 && x.size(2) == n_embd, ShapeError, "CausalSelfAttention: expected input [B, T, ", n_embd,
           "], got ", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), hs = n_embd / n_head;
  MG_CHECK(T <= mask.size(0), ShapeError, "CausalSelfAttention: sequence length ", T, " exceeds block size ",
           mask.size(0));
  auto qkv = split(c_attn->forward(x), n_embd, 2);
  auto heads = [&](const Tensor& t) { return t.view({B, T, n_head, hs}).transpose(1, 2); };  // [B, nh, T, hs]
  Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  auto core = [this](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{attention_core(in[0], in[1], in[2])};
  };
  Tensor y = (selective_recompute ? checkpoint(core, {q, k, v}) : core({q, k, v}))[0];
  y = y.transpose(1, 2).reshape({B, T, n_embd});
  return resid_dropout->forward(c_proj->forward(y));
}

Tensor CausalSelfAttention::attention_core(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (fused)
    return scaled_dot_product_attention(q, k, v, {}, attn_dropout->is_training() ? attn_dropout->p : 0.0, true);
  const int64_t T = q.size(2);
  const double scale = 1.0 / std::sqrt(double(q.size(3)));
  Tensor att = matmul(q, k.transpose(-2, -1));
  if (fused_softmax) {  // the buffer's mask is the causal one
    att = scaled_masked_softmax(att, scale, {}, true);
  } else {
    att = masked_fill(att * scale, mask.slice(0, 0, T).slice(1, 0, T), -INFINITY);
    att = softmax(att, -1);
  }
  return matmul(attn_dropout->forward(att), v);
}

Block::Block(const GPTConfig& c) : UnaryModule("Block") {
  ln_1 = register_module<LayerNorm>("ln_1", Shape{c.n_embd}, 1e-5, true, c.options);
  attn = register_module<CausalSelfAttention>("attn", c.n_embd, c.n_head, c.block_size, c.dropout, c.options);
  ln_2 = register_module<LayerNorm>("ln_2", Shape{c.n_embd}, 1e-5, true, c.options);
  mlp = register_module<MLP>("mlp", c.n_embd, 4 * c.n_embd, c.dropout, GeluApprox::Tanh, c.options);
  attn->selective_recompute = c.selective_recompute;
  attn->fused = c.fused_attention;
  attn->fused_softmax = c.fused_elementwise;
  fused_elementwise = c.fused_elementwise;
}

Tensor Block::forward(const Tensor& x) {
  if (!fused_elementwise) {
    Tensor y = x + attn->forward(ln_1->forward(x));
    return y + mlp->forward(ln_2->forward(y));
  }
  auto [y, h] =
      add_layer_norm(x, attn->forward(ln_1->forward(x)), ln_2->normalized_shape, ln_2->weight, ln_2->bias, ln_2->eps);
  return mlp->forward_residual(h, y);
}

GPT::GPT(const GPTConfig& c) : UnaryModule("GPT"), config(c) {
  MG_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer >= 0 && c.n_embd > 0, ValueError,
           "GPT: expected positive sizes in the config");
  wte = register_module<Embedding>("wte", c.vocab_size, c.n_embd, c.options);
  wpe = register_module<Embedding>("wpe", c.block_size, c.n_embd, c.options);
  drop = register_module<Dropout>("drop", c.dropout);
  h = register_module<ModuleList<Block>>("h");
  for (int64_t i = 0; i < c.n_layer; ++i) {
    MemoryScope scope("h");  // owner labels "h.<i>...."
    h->emplace_back(c);
  }
  ln_f = register_module<LayerNorm>("ln_f", Shape{c.n_embd}, 1e-5, true, c.options);
  init::gpt2_init_(*this, c.n_layer);
}

Tensor GPT::forward(const Tensor& idx) {
  MG_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, ShapeError, "GPT: expected int64 token ids [B, T], got ",
           idx.dtype(), " ", shape_str(idx.shape()));
  const int64_t T = idx.size(1);
  MG_CHECK(T <= config.block_size, ShapeError, "GPT: sequence length ", T, " exceeds block size ", config.block_size);
  Tensor pos = arange(T, TensorOptions(kInt64).device(idx.device()));
  Tensor x = drop->forward(wte->forward(idx) + wpe->forward(pos));
  const int64_t n = int64_t(h->size()), k = config.checkpoint_every;
  for (int64_t i = 0; i < n; i += std::max<int64_t>(k, 1)) {
    if (k <= 0) {
      x = (*h)[size_t(i)].forward(x);
      continue;
    }
    std::vector<Block*> segment;  // blocks [i, i + k) recompute during backward
    for (int64_t j = i; j < std::min(n, i + k); ++j) segment.push_back(&(*h)[size_t(j)]);
    x = checkpoint(
        [segment](const Tensor& in) {
          Tensor y = in;
          for (Block* b : segment) y = b->forward(y);
          return y;
        },
        x);
  }
  return linear(ln_f->forward(x), wte->weight);  // the lm head shares the token embedding
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) { return lm_loss(forward(idx), targets); }

}  // namespace mg::nn
