// Sorting (kernels/*/sort.*): sort, argsort and topk, along any dim, stable, NaN after every number.
#include <cmath>

#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {

const double kNaN = NAN;

Args sorting(int64_t dim, bool descending) { return {{"dim", dim}, {"descending", descending}}; }
Args top(int64_t k, int64_t dim, bool largest) { return {{"k", k}, {"dim", dim}, {"largest", largest}}; }
std::string dim_name(int64_t d) { return d < 0 ? "m" + std::to_string(-d) : std::to_string(d); }

// Equal values on purpose: the sort is stable, so their indices keep their order.
const Input kTies = Grid({4, 6}, {-1, 0, 0.5, 2});
// The gpu's sizes: lines longer than a block, a single-element line, many short lines.
Input big() { return U({13, 257, 9}, -1.7, 1.7); }

}  // namespace

MG_OP_CASES(sort) {
  call([](const Tensors& x, const Args& a) {
    auto [values, indices] = mg::sort(x[0], int_arg(a, "dim"), bool_arg(a, "descending"));
    return Tensors{values, indices};
  });
  for (int64_t d : {0, 1, -1})
    for (bool desc : {false, true})
      add_case("sort_" + dim_name(d) + (desc ? "_descending" : ""), {U({3, 4, 5})}, sorting(d, desc));
  add_case("sort_permuted", {U({5, 3, 4}).permute({1, 2, 0})}, sorting(1, false));
  add_case("sort_zero_dim", {U({3}).select(0, 1)}, sorting(0, false));
  add_case("sort_ties", {kTies}, sorting(1, false)).no_backward("ties");
  add_case("sort_ties_descending", {kTies.t()}, sorting(0, true)).no_backward("ties");
  add_case("sort_values", {Vals({3, 1, 2, 1})}, sorting(0, false))
      .expect({{1, 1, 2, 3}, {1, 3, 2, 0}})
      .no_backward("ties");
  add_case("sort_nan", {Vals({3, kNaN, 1, 2, -INFINITY, INFINITY})}, sorting(0, false))
      .expect({{-INFINITY, 1, 2, 3, INFINITY, kNaN}, {4, 2, 3, 0, 5, 1}})
      .no_backward("NaN and infinities");
  add_case("sort_nan_descending", {Vals({3, kNaN, 1, 2})}, sorting(0, true))
      .expect({{kNaN, 3, 2, 1}, {1, 0, 3, 2}})
      .no_backward("NaN");
  add_case("sort_int32", {IntVals({7, -7, 2, 9, 2}).as(kInt32)}, sorting(0, true))
      .expect({{9, 7, 2, 2, -7}, {3, 0, 2, 4, 1}});
  add_case("sort_empty", {U({3, 0})}, sorting(1, false));
  for (int64_t d : {0, 1, 2})
    for (bool desc : {false, true})
      add_case("sort_big_" + std::to_string(d) + (desc ? "_descending" : ""), {big()}, sorting(d, desc)).big();
  add_case("sort_big_ties", {Grid({7, 3000}, {-1, 0, 0.5, 2})}, sorting(1, false)).big().no_backward("ties");
}

MG_OP_CASES(argsort) {
  call([](const Tensors& x, const Args& a) { return mg::argsort(x[0], int_arg(a, "dim"), bool_arg(a, "descending")); });
  add_case("argsort_last", {U({3, 4, 5})}, sorting(-1, false));
  add_case("argsort_0_descending", {U({3, 4, 5})}, sorting(0, true));
  add_case("argsort_ties", {kTies}, sorting(1, true));
  add_case("argsort_values", {Vals({0.5, -1, 2, 0.5})}, sorting(0, false)).expect({{1, 0, 3, 2}});
}

MG_OP_CASES(topk) {
  call([](const Tensors& x, const Args& a) {
    auto [values, indices] = mg::topk(x[0], int_arg(a, "k"), int_arg(a, "dim"), bool_arg(a, "largest"));
    return Tensors{values, indices};
  });
  for (int64_t d : {0, 1, -1})
    for (bool largest : {true, false})
      add_case("topk_" + dim_name(d) + (largest ? "" : "_smallest"), {U({3, 4, 5})}, top(2, d, largest));
  add_case("topk_all", {U({4, 6})}, top(6, 1, true));
  add_case("topk_none", {U({4, 6})}, top(0, 1, true));
  add_case("topk_transposed", {U({6, 4}).t()}, top(3, 1, false));
  add_case("topk_values", {Vals({1, 5, 3, 4})}, top(2, 0, true)).expect({{5, 4}, {1, 3}});
  // Which of equal values PyTorch's topk returns is unspecified (its cpu kernel is not stable);
  // memgrad's sort is, so equal values come in index order.
  add_case("topk_ties", {Vals({1, 3, 3, 2, 3})}, top(2, 0, true))
      .expect({{3, 3}, {1, 2}})
      .not_torch("PyTorch leaves the order of equal values unspecified")
      .no_backward("ties");
  for (int64_t d : {0, 1, 2}) add_case("topk_big_" + std::to_string(d), {big()}, top(5, d, d != 1)).big();
}
