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
