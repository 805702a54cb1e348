// Activation bytes per GPT layer, from the ledger, next to Korthikanti et al. 2022 ("Reducing
// Activation Recomputation in Large Transformer Models", section 4.1), who count
//     s b h (34 + 5 a s / h)  bytes per layer
// for sequence s, batch b, hidden h, a heads, with 16-bit activations and 1-byte dropout masks.
//
// The forward runs on the meta device (shapes, no bytes: GPT-2 sizes cost nothing) with each
// block under MemoryScope("h.<i>"), so every tensor a block allocates carries its owner label. A
// block's share is what autograd holds at the end of forward under its label: what its ops saved,
// and its output (which the next block's first layer norm saves). The program lists those
// tensors for block h.1 by the op that made them, checks the total against the hand count below
// and against the difference between a 2-layer and a 1-layer model, and compares with the formula.
//
// By hand, with d bytes per element (2 for fp16 storage), per layer (memgrad saves no dropout mask:
// backward regenerates it from the counter-based RNG):
//   layer_norm outputs (ln_1, ln_2; saved by c_attn, c_fc)     2 d sbh
//   their mean and rstd, float32                               16 sb
//   c_attn output q|k|v (saved by q k^T and by att @ v)         3 d sbh
//   softmax output (saved by softmax, and by att @ v)           d as^2b
//   attention dropout output (p > 0; saved by att @ v)          d as^2b
//   the heads merged back, input of attn.c_proj                 d sbh
//   residual after attention (saved by ln_2)                    d sbh
//   c_fc output (saved by gelu)                                 4 d sbh
//   gelu output (saved by mlp.c_proj)                           4 d sbh
//   block output (saved by the next layer norm)                 d sbh
//   total: 16 d sbh + (1 or 2) d as^2b + 16 sb
// Under autocast (float32 parameters) the residual stream stays float32 (2 x 4 sbh), the matmuls
// save half copies of their inputs (layer-norm outputs 2 x 2 sbh, the dropped attention
// probabilities 2 as^2b) and of their weights (12 h^2 x 2 bytes), softmax saves its float32 output
// (4 as^2b): 36 sbh + 6 as^2b + 24 h^2 + 16 sb, with or without dropout (whose float32 output is
// not saved: its half copy is).
//
// With fused attention (GPTConfig::fused_attention: one scaled_dot_product_attention op) the
// [s, s] terms are gone. The op saves contiguous copies of q, k and v (3 d sbh, the c_attn output
// itself is then freed), its output (d sbh) and a float32 log-sum-exp per row (4 asb):
// 17 d sbh + 4 asb + 16 sb, dropout or not; under autocast 38 sbh + 4 asb + 24 h^2 + 16 sb.
//
//   gpt_activations [seq] [batch] [hidden] [heads]     defaults: GPT-2 small, 1024 1 768 12
#include <cstdlib>
#include <map>
#include <string>

#include "ledger.h"

namespace {

struct Shape4 {
  int64_t s, b, h, a;
};

struct Measured {
  std::map<std::string, std::pair<int64_t, int64_t>> by_op;  // "op, bytes each" -> (count, total)
  int64_t block1 = 0;                                        // Activation owned by h.1
  int64_t per_layer_by_difference = 0;                       // A(2 layers) - A(1 layer)
};

// Activation bytes held at the end of forward (loss computed) for `layers` blocks; fills `by_op`
// with the tensors owned by h.1.
int64_t forward_activation(const Shape4& z, int64_t layers, mg::DType storage, bool autocast, double dropout,
                           bool fused, Measured* m) {
  mg::nn::GPTConfig c;
  c.vocab_size = 50304;  // GPT-2's vocabulary padded to a multiple of 64: logits rows are 512 B multiples
  c.block_size = z.s, c.n_layer = layers, c.n_head = z.a, c.n_embd = z.h, c.dropout = dropout;
  c.fused_attention = fused;
  c.options = mg::TensorOptions().device(mg::kMeta).dtype(storage);
  mg::nn::GPT gpt(c);
  const mg::TensorOptions ids = mg::TensorOptions(mg::kInt64).device(mg::kMeta);
  mg::Tensor idx = mg::zeros({z.b, z.s}, ids), targets = mg::zeros({z.b, z.s}, ids);
  const int64_t before = demo::now(mg::Category::Activation, mg::kMeta);
  mg::Tensor loss;
  {
    mg::amp::AutocastGuard guard(mg::kFloat16, autocast);
    mg::Tensor x = gpt.drop->forward(gpt.wte->forward(idx) + gpt.wpe->forward(mg::arange(z.s, ids)));
    for (int64_t i = 0; i < layers; ++i) {
      mg::MemoryScope scope("h." + std::to_string(i));
      x = (*gpt.h)[size_t(i)].forward(x);
    }
    loss = mg::nn::lm_loss(mg::linear(gpt.ln_f->forward(x), gpt.wte->weight), targets);
  }
  if (m) {
    for (const mg::SegmentInfo& seg : mg::memory_segments(mg::kMeta))
      for (const mg::BlockInfo& blk : seg.blocks) {
        if (!blk.in_use || blk.category != mg::Category::Activation ||
            (blk.owner != "h.1" && blk.owner.rfind("h.1.", 0) != 0))
          continue;
        auto& e = m->by_op[blk.op + ", " + std::to_string(blk.allocated)];
        e.first += 1;
        e.second += blk.allocated;
        m->block1 += blk.allocated;
      }
  }
  return demo::now(mg::Category::Activation, mg::kMeta) - before;
}

Measured measure(const Shape4& z, mg::DType storage, bool autocast, double dropout, bool fused = false) {
  Measured m;
  const int64_t two = forward_activation(z, 2, storage, autocast, dropout, fused, &m);
  m.per_layer_by_difference = two - forward_activation(z, 1, storage, autocast, dropout, fused, nullptr);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const Shape4 z{argc > 1 ? std::atoll(argv[1]) : 1024, argc > 2 ? std::atoll(argv[2]) : 1,
                 argc > 3 ? std::atoll(argv[3]) : 768, argc > 4 ? std::atoll(argv[4]) : 12};
  const int64_t sbh = z.s * z.b * z.h, as2b = z.a * z.s * z.s * z.b, sb = z.s * z.b, asb = z.a * z.s * z.b;
  const int64_t korthikanti = 34 * sbh + 5 * as2b;  // bytes: s b h (34 + 5 a s / h)
  std::printf("GPT layer, s = %lld, b = %lld, h = %lld, a = %lld: sbh = %lld, as^2b = %lld\n\n", (long long)z.s,
              (long long)z.b, (long long)z.h, (long long)z.a, (long long)sbh, (long long)as2b);

  // 1. The tensors one block holds, fp16 storage with dropout 0.1 (Megatron's setting), and the same
  // model in float32 under autocast.
  auto list = [&](const char* title, const Measured& m) {
    std::printf("%s: the Activation tensors owned by block h.1, by the op that made them\n", title);
    std::printf("  %-28s %6s %14s %12s\n", "op, bytes each", "count", "bytes", "x sbh");
    for (auto& [key, e] : m.by_op)
      std::printf("  %-28s %6lld %14lld %12.3f\n", key.c_str(), (long long)e.first, (long long)e.second,
                  double(e.second) / double(sbh));
    std::printf("  %-28s %6s %14lld %12.3f\n\n", "total", "", (long long)m.block1, double(m.block1) / double(sbh));
  };
  Measured half = measure(z, mg::kFloat16, false, 0.1), autocast = measure(z, mg::kFloat32, true, 0.1);
  list("fp16 storage, dropout 0.1", half);
  list("autocast fp16 (float32 parameters), dropout 0.1", autocast);
  Measured fused_half = measure(z, mg::kFloat16, false, 0.1, true);
  list("fp16 storage, dropout 0.1, fused attention", fused_half);

  // 2. The totals per layer against the formula.
  struct Row {
    const char* name;
    Measured m;
    int64_t by_hand;
  };
  const int64_t d2 = 2, d4 = 4;
  Row rows[] = {
      {"fp32, dropout 0", measure(z, mg::kFloat32, false, 0.0), 16 * d4 * sbh + d4 * as2b + 16 * sb},
      {"fp32, dropout 0.1", measure(z, mg::kFloat32, false, 0.1), 16 * d4 * sbh + 2 * d4 * as2b + 16 * sb},
      {"fp16 storage, dropout 0", measure(z, mg::kFloat16, false, 0.0), 16 * d2 * sbh + d2 * as2b + 16 * sb},
      {"fp16 storage, dropout 0.1", half, 16 * d2 * sbh + 2 * d2 * as2b + 16 * sb},
      {"autocast fp16, dropout 0", measure(z, mg::kFloat32, true, 0.0), 36 * sbh + 6 * as2b + 24 * z.h * z.h + 16 * sb},
      {"autocast fp16, dropout 0.1", autocast, 36 * sbh + 6 * as2b + 24 * z.h * z.h + 16 * sb},
      {"fused: fp32, dropout 0.1", measure(z, mg::kFloat32, false, 0.1, true), 17 * d4 * sbh + 4 * asb + 16 * sb},
      {"fused: fp16 storage, dropout 0.1", fused_half, 17 * d2 * sbh + 4 * asb + 16 * sb},
      {"fused: autocast fp16, dropout 0.1", measure(z, mg::kFloat32, true, 0.1, true),
       38 * sbh + 4 * asb + 24 * z.h * z.h + 16 * sb},
  };
  std::printf("%-34s %16s %16s %12s %14s\n", "per layer", "ledger (h.1)", "2 layers - 1", "x sbh", "/ Korthikanti");
  for (const Row& r : rows)
    std::printf("%-34s %16lld %16lld %12.3f %14.3f\n", r.name, (long long)r.m.block1,
                (long long)r.m.per_layer_by_difference, double(r.m.block1) / double(sbh),
                double(r.m.block1) / double(korthikanti));
  std::printf("%-34s %16lld %16s %12.3f %14.3f\n\n", "Korthikanti: sbh(34+5as/h)", (long long)korthikanti, "",
              double(korthikanti) / double(sbh), 1.0);

  for (const Row& r : rows) {
    demo::check_bytes(r.m.per_layer_by_difference, r.m.block1,
                      std::string(r.name) + ": block h.1's tensors = 2-layer minus 1-layer model");
    demo::check_bytes(r.m.block1, r.by_hand, std::string(r.name) + ": the hand count");
  }
  // The difference from the formula, term by term: Megatron also keeps three 1-byte dropout masks
  // (attention probabilities as^2b, after attn.c_proj sbh, after mlp.c_proj sbh) and does not count
  // the layer norms' float32 mean and rstd (16 sb).
  demo::check_bytes(korthikanti - rows[3].m.block1, as2b + 2 * sbh - 16 * sb,
                    "Korthikanti minus fp16 storage = dropout masks (as^2b + 2 sbh) - layer-norm stats (16 sb)");
  return demo::exit_code();
}
