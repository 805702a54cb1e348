// Fused attention (kernels/*/attention.*): scaled_dot_product_attention, causal or not, with
// dropout, over head dims around the gpu's 32-lane split and lengths around its 32-key tiles.
#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {
Args attention(bool causal, double p = 0.0, double scale = 0.0) {
  return {{"is_causal", causal}, {"dropout_p", p}, {"scale", scale}};
}
const std::string kDropout = "its dropout mask comes from memgrad's counter-based generator, not PyTorch's";
}  // namespace

MG_OP_CASES(scaled_dot_product_attention) {
  call([](const Tensors& x, const Args& a) {
    return mg::scaled_dot_product_attention(x[0], x[1], x[2], bool_arg(a, "is_causal"), float_arg(a, "dropout_p"),
                                            float_arg(a, "scale"));
  });
  // The gpu keeps the running max, sum and output in registers and sums in another order.
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
}
