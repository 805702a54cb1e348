// A GPT-2 style decoder: token and position embeddings, n pre-norm blocks of causal
// self-attention and MLP, a final layer norm and an lm head tied to the token embedding.
//
// Parameter names follow Hugging Face's GPT-2 without the "transformer." prefix (wte, wpe,
// h.0.ln_1, h.0.attn.c_attn, h.0.attn.c_proj, h.0.ln_2, h.0.mlp.c_fc, h.0.mlp.c_proj, ln_f),
// but weights use nn.Linear's [out, in] layout: Hugging Face's Conv1D stores [in, out], so its
// c_attn/c_proj/c_fc weights must be transposed when converting. The tied lm head has no entry
// of its own (it is wte.weight). The causal mask is a non-persistent buffer.
#pragma once
#include <memgrad/nn/layers.h>

namespace mg::nn {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // positions
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;
  TensorOptions options;  // device and dtype of the parameters
  // Recompute-on-backward: every `checkpoint_every` consecutive blocks run as one checkpoint
  // segment (0: none; 1: every block; ceil(sqrt(n_layer)): the sqrt(n) schedule).
  int64_t checkpoint_every = 0;
  // Selective recompute (Korthikanti et al. 2022): each block keeps its matmul inputs and
  // recomputes only the attention core (q k^T, mask, softmax, dropout, @ v) during backward.
  bool selective_recompute = false;
  // The attention core as one fused op (scaled_dot_product_attention): it saves q, k, v, the
  // output and a log-sum-exp per row instead of the [T, T] scores and probabilities.
  bool fused_attention = false;
  // The block's element-wise chains as fused ops, as torch.compile fuses them: scale + causal mask
  // + softmax (scaled_masked_softmax), the attention residual's add + ln_2 (add_layer_norm) and
  // the MLP's c_proj bias + dropout + residual add (bias_dropout_add). The same values, dropout
  // masks and saved bytes; fewer passes and no short-lived [T, T] scores. false: the single ops.
  bool fused_elementwise = true;
  static GPTConfig gpt2() { return {}; }  // 124,439,808 parameters
};

class CausalSelfAttention : public UnaryModule {
 public:
  CausalSelfAttention(int64_t n_embd, int64_t n_head, int64_t block_size, double dropout = 0.0,
                      const TensorOptions& options = {});
  // x [B, T, C] -> [B, T, C]; position t attends to positions <= t.
  Tensor forward(const Tensor& x) override;
  int64_t n_embd, n_head;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;
  Tensor mask;                       // bool [block_size, block_size], true above the diagonal (the future)
  bool selective_recompute = false;  // run the attention core as a checkpoint segment
  bool fused = false;                // the core as scaled_dot_product_attention
  bool fused_softmax = true;         // scale, mask and softmax as one op (scaled_masked_softmax)
  // softmax(mask(q k^T / sqrt(hs))) -> dropout -> @ v, on heads [B, nh, T, hs].
  Tensor attention_core(const Tensor& q, const Tensor& k, const Tensor& v);
};

class Block : public UnaryModule {
 public:
  explicit Block(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  // x + attn(ln_1(x)), then + mlp(ln_2(x))
  bool fused_elementwise = true;             // GPTConfig::fused_elementwise
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

class GPT : public UnaryModule {
 public:
  // Parameters are initialised with GPT-2's scheme (nn::init::gpt2_init_).
  explicit GPT(const GPTConfig& config);
  // idx int64 [B, T] with T <= block_size -> logits [B, T, vocab_size].
  Tensor forward(const Tensor& idx) override;
  // Mean next-token cross-entropy of forward(idx) against targets [B, T].
  Tensor loss(const Tensor& idx, const Tensor& targets);
  GPTConfig config;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
};

}  // namespace mg::nn
