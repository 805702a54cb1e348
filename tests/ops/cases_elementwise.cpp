// Element-wise ops (kernels/*/elementwise.*): arithmetic with broadcasting and PyTorch's type
// promotion, the scalar forms, unary maps, gelu and bias_gelu, clamp, where, masked_fill,
// comparisons and dropout.
#include <cmath>

#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {

const double kNaN = NAN, kInf = INFINITY;

// The gpu's binary shapes: a column block against a row block, both broadcast; b positive.
Case& big_binary(OpDef& op, const std::string& name, Args args = {}) {
  return op.add_case(name, {U({31, 1, 17}, -1.7, 1.7), U({1, 9, 17}, 0.5, 2.2)}, std::move(args)).big();
}

// An element-wise map of one input: a small input and its transpose (fixture, gradcheck), and the
// gpu's odd 67 x 45 (not a multiple of the vector width), contiguous and transposed.
void map_cases(OpDef& op, const std::string& name, Input small, Input big, const Args& args = {}) {
  op.add_case(name, {small}, args);
  op.add_case(name + "_transposed", {small.t()}, args);
  op.add_case(name + "_67x45", {big}, args).big();
  op.add_case(name + "_67x45_transposed", {big.t()}, args).big();
}
void map_cases(OpDef& op, double lo, double hi) { map_cases(op, op.name(), U({5, 7}, lo, hi), U({67, 45}, -1.7, 1.7)); }

// The values of `x` rounded to a 16-bit type and read back.
double as_half(double x) { return half_to_float(float_to_half(float(x))); }
double as_bfloat16(double x) { return bfloat16_to_float(float_to_bfloat16(float(x))); }

const std::string kTie = "equal operands: the gradient's tie rule is a convention, not a derivative";
const std::string kKink = "an input at the kink";

}  // namespace

// ---- binary arithmetic

MG_OP_CASES(add) {
  call([](const Tensors& x, const Args& a) {
    return mg::add(x[0], x[1], a.count("alpha") ? scalar_arg(a, "alpha") : 1);
  });
  add_case("add_broadcast", {U({3, 1, 5}), U({4, 5})});
  add_case("add_alpha", {U({4, 3}), U({3})}, {{"alpha", 2.5}});
  add_case("add_transposed", {U({5, 3}).t(), U({3, 5})});
  add_case("add_int64_int64", {Ints({3, 4}, -50, 50), Ints({4}, -50, 50)});
  add_case("add_zero_dim", {U({2, 3, 4}), U({})});
  add_case("add_3d_column", {U({2, 3, 4}), U({3, 1})});
  add_case("add_expand_both", {U({1, 3, 1}).expand({2, 3, 4}), U({4}).expand({2, 3, 4})});
  add_case("add_values", {Vals({1, 2, 3, 4}, {2, 2}), Vals({10, 20})}).expect({{11, 22, 13, 24}});
  add_case("add_values_alpha", {Vals({1, 2, 3, 4}, {2, 2}), Vals({10, 20})}, {{"alpha", 2}}).expect({{21, 42, 23, 44}});
  add_case("add_int32", {IntVals({7, -7, 2, 9}).as(kInt32), IntVals({7, -7, 2, 9}).as(kInt32)})
      .expect({{14, -14, 4, 18}});
  add_case("add_bool_bool", {Vals({1, 1, 0, 1}).as(kBool), Vals({1, 0, 0, 1}).as(kBool)}).expect({{1, 1, 0, 1}});
  add_case("add_float16_float32", {Vals({0.1, 0.2, 0.3, 1000}).as(kFloat16), Vals({1, 2, 3, 4})});
  add_case("add_bfloat16", {Vals({0.1, 0.2, 0.3, 1000}).as(kBFloat16), Vals({0.1, 0.2, 0.3, 1000}).as(kBFloat16)})
      .expect(
          [](const std::vector<V>& in) {
            V out;
            for (double x : in[0]) out.push_back(as_bfloat16(x + x));
            return std::vector<V>{out};
          },
          {0, 0});
  big_binary(*this, "add_alpha_broadcast", {{"alpha", 0.5}});
}

MG_OP_CASES(sub) {
  call([](const Tensors& x, const Args& a) {
    return mg::sub(x[0], x[1], a.count("alpha") ? scalar_arg(a, "alpha") : 1);
  });
  add_case("sub_broadcast", {U({2, 3, 5}), U({5})});
  add_case("sub_alpha", {U({3, 1}), U({1, 4})}, {{"alpha", -0.5}});
  add_case("sub_alpha_3d", {U({2, 3, 4}), U({3, 1})}, {{"alpha", -0.75}});
  add_case("sub_values_alpha", {Vals({1, 2, 3, 4}, {2, 2}), Vals({10, 20})}, {{"alpha", 0.5}})
      .expect({{-4, -8, -2, -6}});
  big_binary(*this, "sub_broadcast_big");
}

MG_OP_CASES(mul) {
  call([](const Tensors& x, const Args&) { return x[0] * x[1]; });
  add_case("mul_expanded", {U({3, 1}).expand({3, 4}), U({3, 4})});
  add_case("mul_outer", {U({4, 1}), U({1, 7})});
  add_case("mul_sliced", {U({3, 10}).slice(1, 1, 10, 2), U({3, 1})});
  add_case("mul_int32_float", {Ints({5}, -9, 9).as(kInt32), U({3, 1})});
  add_case("mul_transposed_stepped", {U({4, 3}).t(), U({6, 5}).slice(0, 0, 6, 2).slice(1, 1, 5, 1)});
  add_case("mul_zero_dim", {U({2, 3, 4}), U({})});
  add_case("mul_values", {Vals({1, 2, 3, 4}, {2, 2}), Vals({10, 20})}).expect({{10, 40, 30, 80}});
  add_case("mul_values_outer", {Vals({1, 2}, {2, 1}), Vals({3, 4, 5}, {1, 3})}).expect({{3, 4, 5, 6, 8, 10}});
  // Half: the float product rounded once; 1000 * 1000 overflows half's range (65504) to infinity.
  add_case("mul_float16", {Vals({0.1, 0.2, 0.3, 1000}).as(kFloat16), Vals({0.1, 0.2, 0.3, 1000}).as(kFloat16)})
      .expect(
          [](const std::vector<V>& in) {
            V out;
            for (double x : in[0]) out.push_back(as_half(float(x) * float(x)));
            return std::vector<V>{out};
          },
          {0, 0})
      .no_backward("an infinite output");
  add_case("mul_int64_big", {Ints({101, 3}, -50, 50), Ints({3}, 1, 9)}).big();
  big_binary(*this, "mul_broadcast_big");
}

MG_OP_CASES(div) {
  call([](const Tensors& x, const Args&) { return x[0] / x[1]; });
  add_case("div_broadcast", {U({3, 5}), Away({5}, 0.5, 2.0)});
  add_case("div_rank0", {U({2, 3}), Away({}, 0.5, 2.0)});
  add_case("div_int_int", {Ints({6}, -20, 20), IntVals({3, -4, 7, 2, -5, 6})});
  add_case("div_by_expanded", {U({6, 5}).slice(0, 0, 6, 2).slice(1, 1, 5, 1), Away({4}, 0.5, 2.0).expand({3, 4})});
  add_case("div_values", {Vals({1, 2, 3, 4}, {2, 2}), Vals({10, 20})}).expect({{0.1, 0.1, 0.3, 0.2}});
  // Integer division is true division.
  add_case("div_int32", {IntVals({7, -7, 2, 9}).as(kInt32), IntVals({2, 2, 4, 3}).as(kInt32)})
      .expect({{3.5, -3.5, 0.5, 3}});
  big_binary(*this, "div_broadcast_big");
}

MG_OP_CASES(pow) {
  call([](const Tensors& x, const Args&) { return mg::pow(x[0], x[1]); });
  add_case("pow_tensor", {U({3, 4}, 0.5, 2.0), U({4}, -1.5, 2.0)});
  add_case("pow_tensor_same_shape", {U({3, 4}, 0.3, 2.0), U({3, 4}, -1.5, 1.5)});
  add_case("pow_values", {Vals({1, 2, 3, 4}, {2, 2}), Vals({2, 0.5})}).expect({{1, std::sqrt(2.0), 9, 2}});
  add_case("pow_broadcast_big", {U({1, 9, 17}, 0.5, 2.2), U({31, 1, 17}, -1.7, 1.7)}).big();
}

MG_OP_CASES(maximum) {
  call([](const Tensors& x, const Args&) { return mg::maximum(x[0], x[1]); });
  add_case("maximum", {U({3, 5}), U({5})});
  add_case("maximum_values_ties", {Vals({1, 2, 3, 4}, {2, 2}), Vals({2, 2})}).expect({{2, 2, 3, 4}}).no_backward(kTie);
  add_case("maximum_nan", {Vals({1, kNaN}), Vals({kNaN, 1})}).expect({{kNaN, kNaN}}).no_backward("NaN");
  add_case("maximum_int32", {IntVals({7, -7, 2, 9}).as(kInt32), IntVals({0, 0, 5, 5}).as(kInt32)})
      .expect({{7, 0, 5, 9}});
  big_binary(*this, "maximum_broadcast_big");
}

MG_OP_CASES(minimum) {
  call([](const Tensors& x, const Args&) { return mg::minimum(x[0], x[1]); });
  add_case("minimum", {U({4, 1}), U({3})});
  add_case("minimum_values_ties", {Vals({1, 2, 3, 4}, {2, 2}), Vals({2, 2})}).expect({{1, 2, 2, 2}}).no_backward(kTie);
  add_case("minimum_nan", {Vals({1, kNaN}), Vals({kNaN, 1})}).expect({{kNaN, kNaN}}).no_backward("NaN");
  big_binary(*this, "minimum_broadcast_big");
}

// ---- with a scalar (an integer JSON number is a Python int, which promotes differently)

MG_OP_CASES(add_scalar) {
  call([](const Tensors& x, const Args& a) { return x[0] + scalar_arg(a, "scalar"); });
  add_case("add_int_scalar", {U({3, 4})}, {{"scalar", 2}});
  add_case("add_scalar_values", {Vals({1, 2, 3, 4})}, {{"scalar", 1}}).expect({{2, 3, 4, 5}});
  add_case("add_scalar_big", {U({67, 45}, -1.7, 1.7)}, {{"scalar", 1.25}}).big();
  add_case("add_scalar_big_transposed", {U({67, 45}, -1.7, 1.7).t()}, {{"scalar", 1.25}}).big();
}

MG_OP_CASES(sub_scalar) {
  call([](const Tensors& x, const Args& a) { return x[0] - scalar_arg(a, "scalar"); });
  add_case("sub_float_scalar", {U({5})}, {{"scalar", 1.25}});
  add_case("sub_scalar_values", {Vals({1, 2, 3, 4})}, {{"scalar", 1}}).expect({{0, 1, 2, 3}});
  add_case("sub_scalar_int32", {IntVals({7, -7, 2, 9}).as(kInt32)}, {{"scalar", 10}}).expect({{-3, -17, -8, -1}});
}

MG_OP_CASES(mul_scalar) {
  call([](const Tensors& x, const Args& a) { return x[0] * scalar_arg(a, "scalar"); });
  add_case("mul_scalar", {U({2, 3})}, {{"scalar", -1.5}});
  add_case("mul_scalar_values", {Vals({1, 2, 3, 4})}, {{"scalar", 3}}).expect({{3, 6, 9, 12}});
  add_case("mul_scalar_int32", {IntVals({7, -7, 2, 9}).as(kInt32)}, {{"scalar", 3}}).expect({{21, -21, 6, 27}});
  add_case("mul_scalar_big", {U({67, 45}, -1.7, 1.7)}, {{"scalar", -3.0}}).big();
  add_case("mul_scalar_big_transposed", {U({67, 45}, -1.7, 1.7).t()}, {{"scalar", -3.0}}).big();
}

MG_OP_CASES(div_scalar) {
  call([](const Tensors& x, const Args& a) { return x[0] / scalar_arg(a, "scalar"); });
  add_case("div_scalar", {U({7})}, {{"scalar", 3}});
  add_case("div_scalar_values", {Vals({1, 2, 3, 4})}, {{"scalar", 4}}).expect({{0.25, 0.5, 0.75, 1}});
  add_case("div_scalar_int32", {IntVals({7, -7, 2, 9}).as(kInt32)}, {{"scalar", 2}}).expect({{3.5, -3.5, 1, 4.5}});
}

MG_OP_CASES(rdiv_scalar) {  // scalar / tensor
  call([](const Tensors& x, const Args& a) { return scalar_arg(a, "scalar") / x[0]; });
  add_case("rdiv_scalar", {Away({3, 4}, 0.5, 2.0)}, {{"scalar", 2.0}});
  add_case("rdiv_scalar_values", {Vals({1, 2, 3, 4})}, {{"scalar", 2}}).expect({{2, 1, 2.0 / 3, 0.5}});
}

MG_OP_CASES(pow_scalar) {
  call([](const Tensors& x, const Args& a) { return mg::pow(x[0], scalar_arg(a, "scalar")); });
  add_case("pow_scalar_float", {U({2, 7}, 0.2, 2.0)}, {{"scalar", 2.5}});
  add_case("pow_scalar_int_signed", {U({3, 4})}, {{"scalar", 3}});
  add_case("pow_scalar_negative", {U({5}, 0.3, 2.0)}, {{"scalar", -0.5}});
  add_case("pow_scalar_square_negative_base", {Away({3, 4}, 0.1, 1.5)}, {{"scalar", 2}});
  add_case("pow_scalar_sqrt", {U({3, 4}, 0.3, 2.0)}, {{"scalar", 0.5}});
  add_case("pow_scalar_minus_1_5", {U({3, 4}, 0.3, 2.0)}, {{"scalar", -1.5}});
  add_case("pow_scalar_values", {Vals({1, 2, 3, 4})}, {{"scalar", 2}}).expect({{1, 4, 9, 16}});
  add_case("pow_scalar_big", {U({67, 45}, 0.1, 1.8)}, {{"scalar", 2.5}}).big();
  add_case("pow_scalar_big_transposed", {U({67, 45}, 0.1, 1.8).t()}, {{"scalar", 2.5}}).big();
}

MG_OP_CASES(rsub_scalar) {  // scalar - tensor
  call([](const Tensors& x, const Args& a) { return scalar_arg(a, "scalar") - x[0]; });
  add_case("rsub_scalar", {U({2, 5})}, {{"scalar", 2.0}});
  add_case("rsub_scalar_values", {Vals({1, 2, 3, 4})}, {{"scalar", 10}}).expect({{9, 8, 7, 6}});
  add_case("rsub_scalar_big", {U({67, 45}, -1.7, 1.7)}, {{"scalar", 2.0}}).big();
  add_case("rsub_scalar_big_transposed", {U({67, 45}, -1.7, 1.7).t()}, {{"scalar", 2.0}}).big();
}

// ---- unary maps: x = [-2, -0.5, 0, 1.5] against their formulas

namespace {
const V kX = {-2, -0.5, 0, 1.5};
const V kPositive = {0.25, 1, 4};
double sigmoid_of(double v) { return 1 / (1 + std::exp(-v)); }
double gelu_of(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }
double gelu_tanh_of(double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }
}  // namespace

MG_OP_CASES(neg) {
  call([](const Tensors& x, const Args&) { return -x[0]; });
  map_cases(*this, -2, 2);
  add_case("neg_values", {Vals({1, 2, 3, 4})}).expect({{-1, -2, -3, -4}});
}

MG_OP_CASES(exp) {
  call([](const Tensors& x, const Args&) { return mg::exp(x[0]); });
  map_cases(*this, -2, 2);
  add_case("exp_values", {Vals(kX)}).expect(each([](double v) { return std::exp(v); }));
  // In half: the float result rounded once (exp(1000) overflows to infinity).
  add_case("exp_float16", {Vals({0.1, 0.2, 0.3, 1000}).as(kFloat16)})
      .expect(each([](double v) { return as_half(std::exp(float(v))); }), {0, 0})
      .no_backward("an infinite output")
      .not_torch("PyTorch 1.13 has no float16 exp on the cpu")
      .check(outputs_of_dtype(kFloat16));
}

MG_OP_CASES(log) {
  call([](const Tensors& x, const Args&) { return mg::log(x[0]); });
  map_cases(*this, "log", U({5, 7}, 0.1, 3.0), U({67, 45}, 0.1, 1.8));
  add_case("log_values", {Vals(kPositive)}).expect(each([](double v) { return std::log(v); }));
  add_case("log_zero_negative", {Vals({0, -1})}).expect({{-kInf, kNaN}}).no_backward("log(0) and log(-1)");
}

MG_OP_CASES(sqrt) {
  call([](const Tensors& x, const Args&) { return mg::sqrt(x[0]); });
  map_cases(*this, "sqrt", U({5, 7}, 0.1, 3.0), U({67, 45}, 0.1, 1.8));
  add_case("sqrt_values", {Vals(kPositive)}).expect({{0.5, 1, 2}});
  add_case("sqrt_int64", {IntVals({4, 9})}).expect({{2, 3}});  // float-only math on integers runs in float32
}

MG_OP_CASES(rsqrt) {
  call([](const Tensors& x, const Args&) { return mg::rsqrt(x[0]); });
  map_cases(*this, "rsqrt", U({5, 7}, 0.2, 3.0), U({67, 45}, 0.1, 1.8));
  add_case("rsqrt_values", {Vals(kPositive)}).expect({{2, 1, 0.5}});
}

MG_OP_CASES(abs) {
  call([](const Tensors& x, const Args&) { return mg::abs(x[0]); });
  map_cases(*this, "abs", Away({5, 7}, 0.05, 2.0), U({67, 45}, -1.7, 1.7));
  add_case("abs_values", {Vals(kX)}).expect({{2, 0.5, 0, 1.5}}).no_backward(kKink);
  add_case("abs_int32", {IntVals({7, -7, 2, 9}).as(kInt32)}).expect({{7, 7, 2, 9}});
}

MG_OP_CASES(erf) {
  call([](const Tensors& x, const Args&) { return mg::erf(x[0]); });
  map_cases(*this, -3, 3);
  add_case("erf_values", {Vals({-INFINITY, -2, -0.5, 0, 1.5, 6})}).expect(each([](double v) { return std::erf(v); }));
}

MG_OP_CASES(tanh) {
  call([](const Tensors& x, const Args&) { return mg::tanh(x[0]); });
  map_cases(*this, -3, 3);
  add_case("tanh_values", {Vals(kX)}).expect(each([](double v) { return std::tanh(v); }));
}

MG_OP_CASES(sigmoid) {
  call([](const Tensors& x, const Args&) { return mg::sigmoid(x[0]); });
  map_cases(*this, -5, 5);
  add_case("sigmoid_saturated", {Vals({-30, -12, -1e-3, 0.0, 1e-3, 12, 30})});
  add_case("sigmoid_values", {Vals(kX)}).expect(each(sigmoid_of));
}

MG_OP_CASES(relu) {
  call([](const Tensors& x, const Args&) { return mg::relu(x[0]); });
  map_cases(*this, "relu", Away({5, 7}, 0.01, 2.0), U({67, 45}, -1.7, 1.7));
  add_case("relu_values", {Vals(kX)}).expect({{0, 0, 0, 1.5}}).no_backward(kKink);
}

MG_OP_CASES(silu) {
  call([](const Tensors& x, const Args&) { return mg::silu(x[0]); });
  map_cases(*this, -4, 4);
  add_case("silu_values", {Vals(kX)}).expect(each([](double v) { return v * sigmoid_of(v); }));
}

MG_OP_CASES(gelu) {
  call([](const Tensors& x, const Args& a) {
    return mg::gelu(x[0], string_arg(a, "approximate") == "tanh" ? GeluApprox::Tanh : GeluApprox::None);
  });
  const Args erf{{"approximate", "none"}}, tanh{{"approximate", "tanh"}};
  map_cases(*this, "gelu_erf", U({5, 7}, -4, 4), U({67, 45}, -1.7, 1.7), erf);
  map_cases(*this, "gelu_tanh", U({5, 7}, -4, 4), U({67, 45}, -1.7, 1.7), tanh);
  add_case("gelu_erf_sliced", {U({4, 9}, -3, 3).slice(1, 0, 9, 3)}, erf);
  add_case("gelu_erf_values", {Vals(kX)}, erf).expect(each(gelu_of));
  add_case("gelu_tanh_values", {Vals(kX)}, tanh).expect(each(gelu_tanh_of));
  // The vectorised path with a grid-stride loop; the cpu's vectorised tanh against the formula.
  add_case("gelu_erf_large", {U({1 << 20}, -3, 3)}, erf).big().only({kFloat16});
  add_case("gelu_tanh_linspace", {Vals([] {
             V v;
             for (int i = 0; i <= 4800; ++i) v.push_back(-12 + 24.0 * i / 4800);
             return v;
           }())},
           tanh)
      .big()
      .expect(each(gelu_tanh_of), {1e-5, 2e-6});
}

MG_OP_CASES(bias_gelu) {  // gelu(x + bias) in one pass
  call([](const Tensors& x, const Args& a) {
    return mg::bias_gelu(x[0], x[1], string_arg(a, "approximate") == "tanh" ? GeluApprox::Tanh : GeluApprox::None);
  });
  for (const char* approx : {"none", "tanh"}) {
    const Args args{{"approximate", approx}};
    const std::string s = approx;
    add_case("bias_gelu_" + s, {U({4, 6}, -3, 3), U({6})}, args);
    add_case("bias_gelu_" + s + "_transposed", {U({6, 4}, -3, 3).t(), U({6})}, args);
    for (int64_t n : {1, 7, 768, 3073})
      add_case("bias_gelu_" + s + "_n" + std::to_string(n), {U({5, n}, -1.7, 1.7), U({n}, -1.7, 1.7)}, args).big();
  }
}

MG_OP_CASES(clamp) {
  call([](const Tensors& x, const Args& a) {
    return mg::clamp(x[0], optional_scalar_arg(a, "lo"), optional_scalar_arg(a, "hi"));
  });
  // Values at 0.1 spacing keep away from the bounds, where the gradient's convention would matter.
  V grid;
  for (double v = -2.04; v < 2.05; v += 0.1) grid.push_back(v);
  add_case("clamp_both", {Grid({4, 6}, grid)}, {{"lo", -0.5}, {"hi", 1.0}});
  add_case("clamp_lo", {Grid({7}, grid)}, {{"lo", 0.25}, {"hi", nullptr}});
  add_case("clamp_hi", {Grid({7}, grid)}, {{"lo", nullptr}, {"hi", -0.25}});
  add_case("clamp_symmetric", {Grid({4, 5}, grid)}, {{"lo", -0.5}, {"hi", 0.5}});
  add_case("clamp_values", {Vals(kX)}, {{"lo", -1.0}, {"hi", 1.0}}).expect({{-1, -0.5, 0, 1}});
  add_case("clamp_values_hi_0", {Vals(kX)}, {{"lo", nullptr}, {"hi", 0.0}})
      .expect({{-2, -0.5, 0, 0}})
      .no_backward(kKink);
  add_case("clamp_values_lo_0", {Vals(kX)}, {{"lo", 0.0}, {"hi", nullptr}}).expect({{0, 0, 0, 1.5}}).no_backward(kKink);
  // On integers the dtype stays, with one or both bounds.
  const Input ints = IntVals({7, -7, 2, 9}).as(kInt32);
  add_case("clamp_int32", {ints}, {{"lo", 0}, {"hi", 8}}).expect({{7, 0, 2, 8}});
  add_case("clamp_int32_lo", {ints}, {{"lo", 0}, {"hi", nullptr}}).expect({{7, 0, 2, 9}});
  add_case("clamp_int32_hi", {ints}, {{"lo", nullptr}, {"hi", 3}}).expect({{3, -7, 2, 3}});
  add_case("clamp_int64_lo", {IntVals({-5, 5})}, {{"lo", -1}, {"hi", nullptr}}).expect({{-1, 5}});
  add_case("clamp_big", {U({67, 45}, -1.7, 1.7)}, {{"lo", -0.5}, {"hi", 0.7}}).big();
  add_case("clamp_big_transposed", {U({67, 45}, -1.7, 1.7).t()}, {{"lo", -0.5}, {"hi", 0.7}}).big();
}

MG_OP_CASES(clamp_) {  // in place, on a copy (a leaf cannot change in place)
  call([](const Tensors& x, const Args& a) {
    Tensor y = x[0].clone();
    y.clamp_(scalar_arg(a, "lo"), scalar_arg(a, "hi"));
    return y;
  });
  V grid;
  for (double v = -2.04; v < 2.05; v += 0.1) grid.push_back(v);
  add_case("clamp_inplace_both", {Grid({4, 6}, grid)}, {{"lo", -0.5}, {"hi", 1.0}});
  add_case("clamp_inplace_int32", {IntVals({7, -7, 2, 9}).as(kInt32)}, {{"lo", -1}, {"hi", 1}}).expect({{1, -1, 1, 1}});
}

// ---- selection

MG_OP_CASES(where) {
  call([](const Tensors& x, const Args&) { return mg::where(x[0], x[1], x[2]); });
  add_case("where_broadcast", {Bools({4, 5}), U({3, 1, 5}), U({4, 1})});
  add_case("where_transposed", {Bools({3, 4}), U({4, 3}).t(), U({3, 4})});
  add_case("where_row", {Bools({3, 4}), U({3, 4}), U({4})});
  add_case("where_cond_row", {Bools({4}), U({3, 1}), U({4})});
  add_case("where_values", {Vals({1, 0, 1}).as(kBool), Vals({1, 2, 3}), Vals({-1, -2, -3})}).expect({{1, -2, 3}});
  add_case("where_zero_dim", {Vals({1, 0, 1}).as(kBool), Vals({1, 2, 3}), Vals({0}, {})}).expect({{1, 0, 3}});
  add_case("where_big", {Bools({31, 9, 17}), U({31, 1, 17}, -1.7, 1.7), U({1, 9, 17}, 0.5, 2.2)}).big();
}

MG_OP_CASES(masked_fill) {
  call([](const Tensors& x, const Args& a) { return mg::masked_fill(x[0], x[1], scalar_arg(a, "value")); });
  add_case("masked_fill", {U({4, 6}), Bools({6})}, {{"value", -2.5}});
  add_case("masked_fill_full_mask", {U({3, 5}), Bools({3, 5})}, {{"value", 7}});
  add_case("masked_fill_values", {Vals({1, 2, 3}), Vals({1, 0, 1}).as(kBool)}, {{"value", 9}}).expect({{9, 2, 9}});
  add_case("masked_fill_big", {U({31, 9, 17}, -1.7, 1.7), Bools({1, 9, 17})}, {{"value", 7.0}}).big();
}

// ---- comparisons: bool results, no gradient

namespace {
using Compare = Tensor (*)(const Tensor&, const Tensor&);
using CompareScalar = Tensor (*)(const Tensor&, const Scalar&);

// Values drawn from a few exact numbers, so that some elements compare equal; the gpu's shapes.
void compare_cases(OpDef& op, Compare f) {
  op.call([f](const Tensors& x, const Args&) { return f(x[0], x[1]); });
  op.add_case(op.name(), {Grid({4, 5}, {0, 1, 2}), Grid({5}, {0, 1, 2})});
  op.add_case(op.name() + "_big", {Grid({31, 1, 17}, {-1, 0, 0.5, 1}), Grid({1, 9, 17}, {0, 0.5, 1})}).big();
}
void compare_scalar_cases(OpDef& op, CompareScalar f) {
  op.call([f](const Tensors& x, const Args& a) { return f(x[0], scalar_arg(a, "scalar")); });
  op.add_case(op.name(), {Grid({3, 4}, {0, 0.5, 1})}, {{"scalar", 0.5}});
}
}  // namespace

MG_OP_CASES(eq) {
  compare_cases(*this, mg::eq);
  add_case("eq_int_float", {IntVals({1, 2, 3}), Vals({1, 2, 3})}).expect({{1, 1, 1}});  // compares in float32
  add_case("eq_nan", {Vals({kNaN}), Vals({kNaN})}).expect({{0.0}});
}
MG_OP_CASES(ne) {
  compare_cases(*this, mg::ne);
  add_case("ne_nan", {Vals({kNaN}), Vals({kNaN})}).expect({{1}});
  add_case("ne_int64_big", {Ints({101, 3}, -50, 50), Ints({3}, 1, 9)}).big();
}
MG_OP_CASES(lt) {
  compare_cases(*this, mg::lt);
  add_case("lt_int_float", {Ints({6}, -2, 3), Grid({6}, {-1.5, 0, 1, 2})});
  add_case("lt_values", {Vals({1, 2, 3}), Vals({2, 2, 2})}).expect({{1, 0, 0}});
}
MG_OP_CASES(le) { compare_cases(*this, mg::le); }
MG_OP_CASES(gt) { compare_cases(*this, mg::gt); }
MG_OP_CASES(ge) { compare_cases(*this, mg::ge); }

MG_OP_CASES(eq_scalar) {
  compare_scalar_cases(*this, mg::eq);
  add_case("eq_scalar_values", {Vals({1, 2, 3})}, {{"scalar", 2}}).expect({{0, 1, 0}});
}
MG_OP_CASES(ne_scalar) {
  compare_scalar_cases(*this, mg::ne);
  add_case("ne_scalar_values", {Vals({1, 2, 3})}, {{"scalar", 2}}).expect({{1, 0, 1}});
}
MG_OP_CASES(lt_scalar) {
  compare_scalar_cases(*this, mg::lt);
  add_case("lt_scalar_int64", {IntVals({1, 2, 3})}, {{"scalar", 1.5}}).expect({{1, 0, 0}});
}
MG_OP_CASES(le_scalar) {
  compare_scalar_cases(*this, mg::le);
  add_case("le_scalar_values", {Vals({1, 2, 3})}, {{"scalar", 2}}).expect({{1, 1, 0}});
}
MG_OP_CASES(gt_scalar) {
  compare_scalar_cases(*this, mg::gt);
  add_case("gt_scalar_values", {Vals({1, 2, 3})}, {{"scalar", 2}}).expect({{0, 0, 1}});
}
MG_OP_CASES(ge_scalar) {
  compare_scalar_cases(*this, mg::ge);
  add_case("ge_scalar_values", {Vals({1, 2, 3})}, {{"scalar", 2}}).expect({{0, 1, 1}});
}

// ---- dropout: its mask comes from memgrad's counter-based generator, the same on every device

MG_OP_CASES(dropout) {
  call([](const Tensors& x, const Args& a) { return mg::dropout(x[0], float_arg(a, "p"), bool_arg(a, "training")); });
  const std::string why = "its mask comes from memgrad's counter-based generator, not PyTorch's";
  defaults().not_torch(why).cuda_tolerance(0);  // the same mask and scale: bit for bit
  add_case("dropout", {U({4, 6})}, {{"p", 0.4}, {"training", true}}).check([](const Tensors&, const Tensors& out) {
    int64_t zeros = 0, n = out[0].numel();
    for (double v : out[0].to_vector<double>()) zeros += v == 0.0;
    return zeros > 0 && zeros < n ? "" : "the mask drops nothing or everything";
  });
  add_case("dropout_eval", {U({4, 6})}, {{"p", 0.4}, {"training", false}})
      .check([](const Tensors& in, const Tensors& out) {
        return out[0].is_same(in[0]) ? "" : "dropout in eval mode returns a new tensor, not its input";
      });
  add_case("dropout_p1", {Vals({1, 2})}, {{"p", 1.0}, {"training", true}}).expect({{0, 0}});
  for (int64_t n : {1, 7, 4096 + 3})
    add_case("dropout_n" + std::to_string(n), {U({n}, -1.7, 1.7)}, {{"p", 0.37}, {"training", true}}).big();
}

// ---- bias_dropout_add: residual + dropout(x + bias), the end of a residual branch in one op
MG_OP_CASES(bias_dropout_add) {
  call([](const Tensors& x, const Args& a) {
    return mg::bias_dropout_add(x[0], x[1], x[2], float_arg(a, "p"), bool_arg(a, "training"));
  });
  const std::string why = "its mask comes from memgrad's counter-based generator, not PyTorch's";
  auto drop = [](double p, bool training = true) { return Args{{"p", p}, {"training", training}}; };
  // Each element is the residual plus 0 or (x + bias) / (1 - p), and both occur.
  auto kept_or_dropped = [](double p) {
    return [p](const Tensors& in, const Tensors& out) -> std::string {
      const auto x = in[0].to_vector<double>(), r = in[2].to_vector<double>(), y = out[0].to_vector<double>();
      const auto b = in[1].to_vector<double>();
      int64_t kept = 0, dropped = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const double v = (x[i] + b[i % b.size()]) / (1 - p), d = y[i] - r[i], tol = 1e-2 * (1 + std::abs(v));
        kept += std::abs(d - v) <= tol, dropped += std::abs(d) <= 1e-2 * (1 + std::abs(r[i]));
        if (std::abs(d - v) > tol && std::abs(d) > 1e-2 * (1 + std::abs(r[i])))
          return "element neither kept nor dropped";
      }
      return kept > 0 && dropped > 0 ? "" : "the mask drops nothing or everything";
    };
  };
  add_case("bias_dropout_add_p0", {U({4, 6}), U({6}), U({4, 6})}, drop(0.0));
  add_case("bias_dropout_add_eval", {U({3, 4, 6}), U({6}), U({3, 4, 6})}, drop(0.4, false));
  add_case("bias_dropout_add_p1", {U({4, 6}), U({6}), U({4, 6})}, drop(1.0));
  add_case("bias_dropout_add_transposed", {U({6, 4}).t(), U({6}), U({4, 6})}, drop(0.0));
  add_case("bias_dropout_add_dropout", {U({5, 8}), U({8}), U({5, 8})}, drop(0.4))
      .not_torch(why)
      .check(kept_or_dropped(0.4));
  add_case("bias_dropout_add_dropout_transposed", {U({8, 5}).t(), U({8}), U({8, 5}).t()}, drop(0.3)).not_torch(why);
  add_case("bias_dropout_add_empty", {U({0, 6}), U({6}), U({0, 6})}, drop(0.3)).not_torch(why);
  for (int64_t n : {1, 7, 4096 + 3})
    add_case("bias_dropout_add_n" + std::to_string(n), {U({5, n}), U({n}), U({5, n})}, drop(0.37)).not_torch(why).big();
}
