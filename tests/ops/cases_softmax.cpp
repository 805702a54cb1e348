// The softmax family (kernels/*/softmax.*): softmax and log_softmax.
#include <algorithm>
#include <cmath>

#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {

// Scores [2, 3, 77, 77] with -inf where a causal mask hides a key: rows that start with many -inf
// (`by_columns`: the transposed mask, for a softmax over dim -2).
Input causal_scores(bool by_columns) {
  return U({2, 3, 77, 77}, -1.7, 1.7).map([by_columns](size_t i, double v) {
    size_t r = (i / 77) % 77, c = i % 77;
    return (by_columns ? r > c : c > r) ? -INFINITY : v;
  });
}

// Logits up to about +-14 with about one in 43 masked to -inf: the cpu's vectorised exp.
Input masked_logits() {
  return U({64, 2048}, -14, 14).map([](size_t i, double v) { return (i * 2654435761u) % 43 == 0 ? -INFINITY : v; });
}

// softmax over the rows of [rows, n] in double: exp(x - max) / sum.
V softmax_rows(const V& x, size_t n) {
  V p(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mx = -INFINITY, sum = 0;
    for (size_t c = 0; c < n; ++c) mx = std::max(mx, x[r * n + c]);
    for (size_t c = 0; c < n; ++c) sum += std::exp(x[r * n + c] - mx);
    for (size_t c = 0; c < n; ++c) p[r * n + c] = std::exp(x[r * n + c] - mx) / sum;
  }
  return p;
}

void softmax_cases(OpDef& op) {
  const std::string n = op.name();
  op.add_case(n + "_dim1", {U({3, 4, 5}, -3, 3)}, {{"dim", 1}});
  op.add_case(n + "_last", {U({3, 7}, -3, 3)}, {{"dim", -1}});
  op.add_case(n + "_transposed", {U({6, 4}, -3, 3).t()}, {{"dim", 1}});
  op.add_case(n + "_size1", {U({3, 1})}, {{"dim", 1}});
  op.add_case(n + "_large", {U({2, 5}, 80, 90)}, {{"dim", 1}});  // exp overflows without the max shift
  for (int64_t d : {0, 2}) op.add_case(n + "_dim" + std::to_string(d), {U({2, 3, 4})}, {{"dim", d}});
  for (int64_t d : {0, 1, 2})
    op.add_case(n + "_big_dim" + std::to_string(d), {U({13, 257, 9}, -1.7, 1.7)}, {{"dim", d}}).big();
}

const V kRows = {0, std::log(3.0), 1000, 1000};  // [2, 2]: large logits must not overflow

}  // namespace

MG_OP_CASES(softmax) {
  call([](const Tensors& x, const Args& a) { return mg::softmax(x[0], int_arg(a, "dim")); });
  softmax_cases(*this);
  add_case("softmax_values", {Vals(kRows, {2, 2})}, {{"dim", 1}}).expect({{0.25, 0.75, 0.5, 0.5}});
  add_case("softmax_values_columns", {Vals({0, 0, 0, std::log(3.0)}, {2, 2})}, {{"dim", 0}})
      .expect({{0.5, 0.25, 0.5, 0.75}});
  add_case("softmax_float16_zeros", {Vals(V(4, 0.0)).as(kFloat16)}, {{"dim", 0}})
      .expect({{0.25, 0.25, 0.25, 0.25}})
      .not_torch("PyTorch 1.13 has no float16 softmax on the cpu")
      .check(outputs_of_dtype(kFloat16));
  add_case("softmax_causal", {causal_scores(false)}, {{"dim", -1}}).big();
  add_case("softmax_causal_columns", {causal_scores(true)}, {{"dim", -2}}).big();
  // Against the formula in double; exp(-inf) is exactly 0.
  add_case("softmax_masked_2048", {masked_logits()}, {{"dim", 1}})
      .big()
      .expect([](const std::vector<V>& in) { return std::vector<V>{softmax_rows(in[0], 2048)}; }, {1e-5, 0});
}

MG_OP_CASES(log_softmax) {
  call([](const Tensors& x, const Args& a) { return mg::log_softmax(x[0], int_arg(a, "dim")); });
  softmax_cases(*this);
  add_case("log_softmax_values", {Vals(kRows, {2, 2})}, {{"dim", 1}})
      .expect({{std::log(0.25), std::log(0.75), std::log(0.5), std::log(0.5)}}, {1e-5, 1e-5});
  add_case("log_softmax_wide", {U({3, 50257}, -1.7, 1.7)}, {{"dim", -1}}).big();  // a GPT-2 vocabulary row
  add_case("log_softmax_masked_2048", {masked_logits()}, {{"dim", 1}})
      .big()
      .expect(
          [](const std::vector<V>& in) {
            V p = softmax_rows(in[0], 2048);
            for (double& v : p) v = std::log(v);
            return std::vector<V>{p};
          },
          {1e-5, 1e-5});
}

// ---- scaled_masked_softmax: softmax(scale * x + mask) over the last dim, the attention scores'
// chain as one op; masks as scaled_dot_product_attention takes them.
namespace {
Args scaled(double scale, bool causal = false) { return {{"scale", scale}, {"is_causal", causal}}; }
// A random bool mask in which every query sees key 0 (a row that sees no key is NaN).
Input keys_seen(const Shape& s) {
  const size_t tk = size_t(s.back());
  return Bools(s).map([tk](size_t i, double v) { return i % tk == 0 ? 1 : v; });
}
}  // namespace

MG_OP_CASES(scaled_masked_softmax) {
  call([](const Tensors& x, const Args& a) {
    return mg::scaled_masked_softmax(x[0], float_arg(a, "scale"), optional_input(x, 1), bool_arg(a, "is_causal"));
  });
  add_case("scaled_masked_softmax_plain", {U({2, 3, 5, 7}, -3, 3)}, scaled(0.5));
  add_case("scaled_masked_softmax_causal", {U({2, 5, 5}, -3, 3)}, scaled(0.35, true));
  add_case("scaled_masked_softmax_causal_wide", {U({2, 4, 6}, -3, 3)}, scaled(1.0, true));
  add_case("scaled_masked_softmax_causal_tall", {U({2, 6, 4}, -3, 3)}, scaled(0.6, true));  // rows past Tk see all
  add_case("scaled_masked_softmax_causal_transposed", {U({2, 6, 6}, -3, 3).permute({0, 2, 1})}, scaled(0.7, true));
  add_case("scaled_masked_softmax_bool", {U({2, 3, 5, 6}, -3, 3), keys_seen({5, 6})}, scaled(0.5));
  add_case("scaled_masked_softmax_bool_per_batch", {U({2, 3, 5, 6}, -3, 3), keys_seen({2, 1, 5, 6})}, scaled(2.0));
  add_case("scaled_masked_softmax_additive", {U({2, 3, 5, 6}, -3, 3), U({5, 6}, -2, 2)}, scaled(0.5));
  add_case("scaled_masked_softmax_additive_no_grad", {U({3, 5, 6}, -3, 3), U({3, 1, 6}, -2, 2).no_grad()},
           scaled(0.25));
  add_case("scaled_masked_softmax_additive_minus_inf",
           {U({2, 4, 6}, -3, 3), U({4, 6}, -2, 2).no_grad().map([](size_t i, double v) {
              return i % 6 == 0 || i % 3 != 0 ? v : -INFINITY;
            })},
           scaled(0.5));
  add_case("scaled_masked_softmax_empty", {U({2, 0, 5})}, scaled(0.5, true));
  add_case("scaled_masked_softmax_big_causal", {U({2, 3, 67, 67}, -3, 3)}, scaled(0.125, true)).big();
  add_case("scaled_masked_softmax_big_bool", {U({2, 33, 257}, -3, 3), keys_seen({33, 257})}, scaled(0.125)).big();
  add_case("scaled_masked_softmax_big_additive", {U({3, 40, 300}, -3, 3), U({40, 300}, -2, 2)}, scaled(0.3)).big();
}
