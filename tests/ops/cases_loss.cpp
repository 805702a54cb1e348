// Losses (kernels/*/loss.*): cross_entropy (fused with log_softmax; ignore_index, label smoothing,
// [N, C, d...] logits) and mse_loss.
#include <algorithm>
#include <cmath>

#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {

Reduction reduction_of(const Args& a) {
  const std::string& r = string_arg(a, "reduction");
  return r == "mean" ? Reduction::Mean : r == "sum" ? Reduction::Sum : Reduction::None;
}

Args ce(const std::string& reduction = "mean", int64_t ignore = -100, double smoothing = 0.0) {
  return {{"ignore_index", ignore}, {"label_smoothing", smoothing}, {"reduction", reduction}};
}

}  // namespace

MG_OP_CASES(cross_entropy) {
  call([](const Tensors& x, const Args& a) {
    return mg::cross_entropy(x[0], x[1], int_arg(a, "ignore_index"), float_arg(a, "label_smoothing"), reduction_of(a));
  });
  const Input logits = U({6, 5}, -3, 3), target = IntVals({0, 4, 2, 2, 1, 3});
  auto ignoring = [](double v) { return IntVals({0, v, 2, 4, v, 3}); };
  for (const std::string red : {"mean", "sum", "none"}) {
    add_case("cross_entropy_" + red, {logits, target}, ce(red));
    add_case("cross_entropy_ignore_default_" + red, {logits, ignoring(-100)}, ce(red));
    add_case("cross_entropy_smoothing_" + red, {logits, target}, ce(red, -100, 0.1));
    add_case("cross_entropy_ignore_2_" + red, {U({4, 5}, -2, 2), IntVals({2, 0, 2, 3})}, ce(red, 2));
    add_case("cross_entropy_ignore_smoothing_" + red, {U({4, 5}, -2, 2), IntVals({1, -100, 4, 3})}, ce(red, -100, 0.1));
    add_case("cross_entropy_ncd_smoothing_" + red, {U({2, 3, 4}, -2, 2), IntVals({0, 2, 1, -100, 2, 2, 0, 1}, {2, 4})},
             ce(red, -100, 0.2));
  }
  add_case("cross_entropy_ignore_1", {logits, ignoring(1)}, ce("mean", 1));
  add_case("cross_entropy_ignore_smoothing", {logits, ignoring(1)}, ce("mean", 1, 0.2));
  add_case("cross_entropy_ncd", {U({3, 5, 4}, -3, 3), Ints({3, 4}, 0, 5)}, ce());
  add_case("cross_entropy_ncd_none", {U({3, 5, 4}, -3, 3), Ints({3, 4}, 0, 5)}, ce("none"));
  add_case("cross_entropy_ncd_transposed_none", {U({2, 3, 4}).t(1, 2), Ints({2, 3}, 0, 4)}, ce("none", -100, 0.1));
  add_case("cross_entropy_nchw_smoothing_ignore",
           {U({2, 4, 3, 2}, -3, 3), IntVals({0, 3, 1, -100, 2, 2, 3, 1, -100, 0, 1, 3}, {2, 3, 2})},
           ce("mean", -100, 0.15));
  // Equal logits over C classes give log C; a confident right answer about 0.
  const Input confident = Vals({0, 0, 0, 0, 100, 0}, {2, 3});
  const double log3 = std::log(3.0);
  add_case("cross_entropy_values_none", {confident, IntVals({2, 1})}, ce("none")).expect({{log3, 0}}, {1e-5, 1e-5});
  add_case("cross_entropy_values_mean", {confident, IntVals({2, 1})}, ce()).expect({{log3 / 2}}, {1e-5, 1e-5});
  add_case("cross_entropy_values_sum", {confident, IntVals({2, 1})}, ce("sum")).expect({{log3}}, {1e-5, 1e-5});
  add_case("cross_entropy_values_ignored", {confident, IntVals({2, -100})}, ce())
      .expect({{log3}}, {1e-5, 1e-5});  // the mean over the rows kept
  // Label smoothing 0.3 on the confident row: 0.7 * 0 + 0.3 * mean(-log p) = 0.3 * (2 * 100) / 3.
  add_case("cross_entropy_values_smoothing", {confident.slice(0, 1, 2), IntVals({1})}, ce("mean", -100, 0.3))
      .expect({{20}}, {1e-4, 1e-4});
  add_case("cross_entropy_values_ncd", {Vals(V(8, 0.0), {1, 4, 2}), IntVals({0, 3}, {1, 2})}, ce("none"))
      .expect({{std::log(4.0), std::log(4.0)}}, {1e-5, 1e-5});
  // The gpu's rows: 1000 classes, two ignored targets, every reduction, with and without smoothing.
  const Input wide = U({37, 1000}, -5.1, 5.1),
              targets = Ints({37}, 0, 1000).map([](size_t i, double v) { return i == 4 || i == 20 ? -100 : v; });
  for (double smoothing : {0.0, 0.1})
    for (const std::string red : {"mean", "sum", "none"})
      add_case("cross_entropy_1000_" + red + (smoothing > 0 ? "_smoothing" : ""), {wide, targets},
               ce(red, -100, smoothing))
          .big()
          .cuda_tolerance(4);
  // 2048 classes against the formula in double: logsumexp(row) - row[target], averaged.
  add_case("cross_entropy_2048", {U({64, 2048}, -40, 40), Ints({64}, 0, 2048)}, ce())
      .big()
      .expect(
          [](const std::vector<V>& in) {
            const V& z = in[0];
            double loss = 0;
            for (size_t r = 0; r < 64; ++r) {
              double mx = -INFINITY, sum = 0;
              for (size_t c = 0; c < 2048; ++c) mx = std::max(mx, z[r * 2048 + c]);
              for (size_t c = 0; c < 2048; ++c) sum += std::exp(z[r * 2048 + c] - mx);
              loss += (mx + std::log(sum) - z[r * 2048 + size_t(in[1][r])]) / 64;
            }
            return std::vector<V>{{loss}};
          },
          {1e-5, 0});
}

MG_OP_CASES(mse_loss) {
  call([](const Tensors& x, const Args& a) { return mg::mse_loss(x[0], x[1], reduction_of(a)); });
  for (const std::string red : {"mean", "sum", "none"}) {
    add_case("mse_loss_" + red, {U({3, 5}), U({3, 5})}, {{"reduction", red}});
    add_case("mse_loss_big_" + red, {U({67, 45}, -1.7, 1.7), U({67, 45}, -1.7, 1.7)}, {{"reduction", red}}).big();
  }
  add_case("mse_loss_transposed", {U({5, 3}).t(), U({3, 5})}, {{"reduction", "mean"}});
  add_case("mse_loss_values_mean", {Vals({1, 2, 3}), Vals({1, 0, 0})}, {{"reduction", "mean"}}).expect({{13.0 / 3}});
  add_case("mse_loss_values_sum", {Vals({1, 2, 3}), Vals({1, 0, 0})}, {{"reduction", "sum"}}).expect({{13}});
}
