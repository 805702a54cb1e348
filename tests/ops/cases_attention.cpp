// Fused attention (kernels/*/attention.*): scaled_dot_product_attention in libtorch's argument
// order (q, k, v, attn_mask, dropout_p, is_causal, scale), causal or with a bool or additive mask
// (inputs 4), broadcast leading dims, with dropout, over head dims around the gpu's 32-lane split
// and lengths around its 32- and 64-key tiles.
#include <cmath>
#include <optional>

#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {
Args attention(bool causal, double p = 0.0, Arg scale = nullptr) {
  return {{"is_causal", causal}, {"dropout_p", p}, {"scale", scale}};
}
// A random bool mask in which every query sees key 0 (PyTorch's composed softmax gives NaN for a
// query that sees no key), of shape [..., Tq, Tk].
Input bool_mask(const Shape& s) {
  const size_t tk = size_t(s.back());
  return Bools(s).map([tk](size_t i, double v) { return i % tk == 0 ? 1 : v; });
}
const std::string kDropout = "its dropout mask comes from memgrad's counter-based generator, not PyTorch's";
}  // namespace

MG_OP_CASES(scaled_dot_product_attention) {
  call([](const Tensors& x, const Args& a) {
    std::optional<double> scale;
    if (auto s = optional_scalar_arg(a, "scale")) scale = s->value;
    return mg::scaled_dot_product_attention(x[0], x[1], x[2], optional_input(x, 3), float_arg(a, "dropout_p"),
                                            bool_arg(a, "is_causal"), scale);
  });
  // On cuda every case runs under each variant of the attention kernels: "mma" (float16/bfloat16 on
  // tensor cores where the head dim is a multiple of 16; the other cases fall through to simt) and "simt".
  variants_of({"attention"});
  // The gpu keeps the running max, sum and output in registers and sums in another order; mma rounds
  // the probabilities (and score gradients) to 16 bits before their products, as flash attention does.
  defaults().cuda_tolerance([](DType t, const std::string&) {
    return t == kFloat32 ? Tol{1e-4, 1e-5} : scaled(tol_for(t), 8);
  });
  for (bool causal : {false, true}) {
    const std::string c = causal ? "_causal" : "";
    add_case("attention" + c, {U({2, 3, 5, 4}), U({2, 3, 5, 4}), U({2, 3, 5, 4})}, attention(causal));
    add_case("attention_more_keys" + c, {U({1, 2, 3, 4}), U({1, 2, 6, 4}), U({1, 2, 6, 4})}, attention(causal));
    add_case("attention_more_queries" + c, {U({1, 2, 6, 4}), U({1, 2, 3, 4}), U({1, 2, 3, 4})}, attention(causal));
    add_case("attention_dropout" + c, {U({2, 3, 5, 4}), U({2, 3, 5, 4}), U({2, 3, 5, 4})}, attention(causal, 0.25))
        .not_torch(kDropout);
  }
  add_case("attention_scale", {U({3, 5, 4}), U({3, 5, 4}), U({3, 5, 4})}, attention(false, 0.0, 0.7));
  // Broadcast leading dims: k and v shared by the batch, or by the heads too.
  add_case("attention_broadcast_kv", {U({2, 3, 5, 4}), U({1, 3, 6, 4}), U({3, 6, 4})}, attention(false));
  add_case("attention_broadcast_q_causal", {U({3, 5, 4}), U({2, 3, 5, 4}), U({2, 1, 5, 4})}, attention(true));
  // Masks: bool (true: the query sees the key) and additive, broadcast over batch and heads.
  const Input q = U({2, 3, 5, 4}), kv = U({2, 3, 6, 4});
  add_case("attention_bool_mask", {q, kv, kv, bool_mask({5, 6})}, attention(false));
  add_case("attention_bool_mask_per_batch", {q, kv, kv, bool_mask({2, 1, 5, 6})}, attention(false, 0.0, 0.5));
  add_case("attention_bool_mask_full", {q, kv, kv, bool_mask({2, 3, 5, 6})}, attention(false));
  add_case("attention_bool_mask_broadcast_kv", {q, U({3, 6, 4}), U({1, 6, 4}), bool_mask({3, 1, 6})}, attention(false));
  add_case("attention_bool_mask_dropout", {q, kv, kv, bool_mask({5, 6})}, attention(false, 0.25)).not_torch(kDropout);
  add_case("attention_additive_mask", {q, kv, kv, U({5, 6}, -2, 2).no_grad()}, attention(false));
  add_case("attention_additive_mask_minus_inf",
           {q, kv, kv, U({2, 1, 5, 6}, -2, 2).no_grad().map([](size_t i, double v) {
              return i % 6 != 0 && i % 4 == 1 ? -INFINITY : v;  // keys a query never sees, key 0 always seen
            })},
           attention(false));
  // An additive mask that requires grad (a learned bias) takes the composed path, which keeps the
  // probabilities for the mask's gradient.
  add_case("attention_additive_mask_grad", {q, kv, kv, U({2, 1, 5, 6}, -2, 2)}, attention(false));
  add_case("attention_additive_mask_grad_transposed", {q, kv, kv, U({6, 5}, -2, 2).t()}, attention(false, 0.0, 0.3));
  // A query that sees no key gets zeros; the others a softmax (here uniform: q is zero).
  add_case("attention_row_sees_nothing",
           {Vals({0, 0, 0, 0}, {2, 2}), Vals({1, -1, 2, 0}, {2, 2}), Vals({1, 2, 3, 4}, {2, 2}),
            Vals({0, 0, 1, 1}, {2, 2}).as(kBool)},
           attention(false))
      .expect({{0, 0, 2, 3}})
      .not_torch("PyTorch's composed softmax gives NaN for a query that sees no key; memgrad gives zeros");
  add_case("attention_heads_transposed", {U({2, 5, 3, 4}).t(1, 2), U({2, 5, 3, 4}).t(1, 2), U({2, 5, 3, 4}).t(1, 2)},
           attention(true));
  struct Size {
    int64_t Tq, Tk, D;
  };
  for (const Size& s :
       {Size{1, 1, 1}, Size{33, 33, 16}, Size{71, 71, 64}, Size{200, 200, 80}, Size{40, 97, 128}, Size{97, 40, 32}})
    for (bool causal : {true, false})
      for (double p : {0.0, 0.25}) {
        const std::string name = "attention_Tq" + std::to_string(s.Tq) + "_Tk" + std::to_string(s.Tk) + "_D" +
                                 std::to_string(s.D) + (causal ? "_causal" : "") + (p > 0 ? "_dropout" : "");
        add_case(name,
                 {U({2, 3, s.Tq, s.D}, -1.7, 1.7), U({2, 3, s.Tk, s.D}, -1.7, 1.7), U({2, 3, s.Tk, s.D}, -1.7, 1.7)},
                 attention(causal, p))
            .big();
      }
  // The kernels read masks through strides: broadcast, per batch, transposed; k and v broadcast.
  const Input bq = U({2, 3, 71, 64}, -1.7, 1.7), bkv = U({2, 3, 97, 64}, -1.7, 1.7);
  add_case("attention_big_bool_mask", {bq, bkv, bkv, bool_mask({2, 1, 71, 97})}, attention(false)).big();
  add_case("attention_big_bool_mask_dropout", {bq, bkv, bkv, bool_mask({71, 97})}, attention(false, 0.25)).big();
  add_case("attention_big_additive_mask", {bq, bkv, bkv, U({97, 71}, -3, 3).no_grad().t()}, attention(false)).big();
  // -inf here and there, and queries 0 and 5 of each head seeing no key (zeros out).
  add_case("attention_big_additive_mask_full",
           {bq, bkv, bkv, U({2, 3, 71, 97}, -3, 3).no_grad().map([](size_t i, double v) {
              const size_t row = i / 97 % 71;
              return row == 0 || row == 5 || i % 5 == 1 ? -INFINITY : v;
            })},
           attention(false))
      .big();
  add_case("attention_big_bool_mask_empty_rows",
           {bq, bkv, bkv, Bools({71, 97}).map([](size_t i, double v) { return i / 97 == 3 ? 0 : v; })},
           attention(false, 0.25))
      .big();
  add_case("attention_big_broadcast_kv", {bq, U({1, 3, 97, 64}, -1.7, 1.7), U({3, 97, 64}, -1.7, 1.7)}, attention(true))
      .big();
}
