#include "sizes.h"

namespace memgrad_cli {

int64_t checked_product(const std::vector<Factor>& factors, const std::string& what, int64_t limit) {
  std::optional<int64_t> p = 1;
  std::string text;
  for (const Factor& f : factors) {
    if (p) p = mg::checked_mul(*p, f.value);
    const std::string v = std::to_string(f.value);  // "--batch 8", "4 (bytes per float32)", "12"
    text += (text.empty() ? "" : " x ") + (f.name.rfind("--", 0) == 0 ? f.name + " " + v
                                           : f.name.empty()           ? v
                                                                      : v + " (" + f.name + ")");
  }
  if (!p || *p > limit)
    throw UsageError(what + ": " + text + " is more than " +
                     (limit == INT64_MAX ? "2^63 - 1, the largest count int64 holds"
                                         : mg::format_bytes(limit) + " (" + std::to_string(limit) +
                                               " B), the most one allocation can ask of any device"));
  return *p;
}

void check_sizes(const mg::train::ModelSpec& spec, const StepFlags& s) {
  const int64_t most = int64_t(mg::memory::kMaxRequest);
  const Factor f32{"bytes per float32", 4};
  const Factor ranks{"processes", s.world_size};
  if (spec.kind == mg::train::ModelSpec::Kind::MLP) {
    const Factor layers{"--layers", spec.mlp_layers}, width{"--width", spec.mlp_width}, batch{"--batch", s.batch};
    checked_product({batch, {"--accum", s.accum}, ranks}, "rows per step");
    checked_product({width, width, f32}, "a layer's weight", most);
    checked_product({batch, width, f32}, "a layer's activations", most);
    checked_product({layers, width, width, f32}, "the parameters' bytes");
    checked_product({layers, batch, width, f32}, "the activations' bytes");
    return;
  }
  const mg::nn::GPTConfig& c = spec.gpt;
  const Factor batch{"--batch", s.batch}, seq{"--seq", s.seq}, vocab{"--vocab", c.vocab_size},
      embd{"--n-embd", c.n_embd}, layers{"--n-layer", c.n_layer}, heads{"--n-head", c.n_head};
  checked_product({batch, seq, {"--accum", s.accum}, ranks}, "tokens per step");
  checked_product({vocab, embd, f32}, "the token embedding", most);
  checked_product({{"positions (--seq)", c.block_size}, embd, f32}, "the position embedding", most);
  checked_product({{"", 4}, embd, embd, f32}, "an MLP weight", most);
  checked_product({batch, seq, vocab, f32}, "the logits", most);
  checked_product({batch, heads, seq, seq, f32}, "the attention scores", most);
  checked_product({batch, seq, {"", 4}, embd, f32}, "a block's MLP activations", most);
  const int64_t block = checked_product({{"", 12}, embd, embd}, "a block's parameters");
  checked_product({layers, {"a block's parameters", block}, f32}, "the parameters' bytes");
  checked_product({layers, batch, seq, embd, f32}, "the blocks' activations");
}

}  // namespace memgrad_cli
