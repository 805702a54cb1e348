// Reductions (kernels/*/reduce.*): sum, mean, var, amax, amin, max and min (over a dim, giving
// values and indices, and over everything), argmax, argmin, sum_to.
#include <cmath>

#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {

const double kNaN = NAN;

struct Dims {
  std::vector<int64_t> dims;
  bool keepdim;
};
// Every reduction over dims of [3, 4, 5]: all, one, two (adjacent or not), negative, with and
// without keepdim.
const std::vector<Dims> kDims = {{{}, false},  {{0}, false},    {{0}, true},    {{1}, false},
                                 {{1}, true},  {{1, 2}, false}, {{1, 2}, true}, {{-1}, false},
                                 {{-1}, true}, {{0, 2}, false}, {{0, 2}, true}};
std::string dims_name(const Dims& d) {
  std::string s = d.dims.empty() ? "_all" : "_dims";
  for (int64_t k : d.dims) s += "_" + (k < 0 ? "m" + std::to_string(-k) : std::to_string(k));
  return s + (d.keepdim ? "_keepdim" : "");
}
Args dims_args(const Dims& d) { return {{"dims", d.dims}, {"keepdim", d.keepdim}}; }

// [5, 3, 4] permuted to a [3, 4, 5] view; the gpu's odd sizes.
Input permuted() { return U({5, 3, 4}).permute({1, 2, 0}); }
Input big() { return U({13, 257, 9}, -1.7, 1.7); }
const std::vector<Dims> kBigDims = {{{}, false},  {{0}, false},    {{1}, false},
                                    {{2}, false}, {{0, 2}, false}, {{1, 2}, false}};

// The reductions over dims (sum, mean, amax, amin): the grid of dims on [3, 4, 5], a permuted view,
// and the gpu's sizes (within `gpu_factor` times tol_for: long sums round differently there).
void dims_cases(OpDef& op, bool gpu_keepdim = false, double gpu_factor = 1) {
  for (const Dims& d : kDims) op.add_case(op.name() + dims_name(d), {U({3, 4, 5})}, dims_args(d));
  op.add_case(op.name() + "_last_permuted", {permuted()}, {{"dims", {-1}}, {"keepdim", false}});
  op.add_case(op.name() + "_dims_0_2_permuted", {permuted()}, {{"dims", {0, 2}}, {"keepdim", false}});
  for (Dims d : kBigDims) {
    d.keepdim = gpu_keepdim;
    op.add_case(op.name() + "_big" + dims_name(d), {big()}, dims_args(d)).big().cuda_tolerance(gpu_factor);
  }
}

const V k123456 = {1, 2, 3, 4, 5, 6};  // [2, 3]

}  // namespace

MG_OP_CASES(sum) {
  call([](const Tensors& x, const Args& a) { return mg::sum(x[0], ints_arg(a, "dims"), bool_arg(a, "keepdim")); });
  dims_cases(*this, false, 8);
  add_case("sum_expanded", {U({1, 4}).expand({3, 4})}, {{"dims", {0}}, {"keepdim", false}});
  add_case("sum_transposed", {U({4, 3}).t()}, {{"dims", {1}}, {"keepdim", false}});
  add_case("sum_values_all", {Vals(k123456, {2, 3})}, {{"dims", std::vector<int64_t>{}}, {"keepdim", false}})
      .expect({{21}});
  add_case("sum_values_0", {Vals(k123456, {2, 3})}, {{"dims", {0}}, {"keepdim", false}}).expect({{5, 7, 9}});
  add_case("sum_values_1_keepdim", {Vals(k123456, {2, 3})}, {{"dims", {1}}, {"keepdim", true}}).expect({{6, 15}});
  add_case("sum_values_m1_0", {Vals(k123456, {2, 3})}, {{"dims", {-1, 0}}, {"keepdim", false}}).expect({{21}});
  add_case("sum_values_arange_0_2",
           {Vals(
               [] {
                 V v;
                 for (int i = 0; i < 24; ++i) v.push_back(i);
                 return v;
               }(),
               {2, 3, 4})},
           {{"dims", {0, 2}}, {"keepdim", false}})
      .expect({{60, 92, 124}});
  add_case("sum_int32", {IntVals({7, -7, 2, 9}).as(kInt32)}, {{"dims", std::vector<int64_t>{}}, {"keepdim", false}})
      .expect({{11}});  // in int64
  add_case("sum_bool", {Vals({1, 1, 0, 1}).as(kBool)}, {{"dims", std::vector<int64_t>{}}, {"keepdim", false}})
      .expect({{3}});
  // Summed in int64, not double: 2^53 + 1 (the fixture holds it exactly).
  add_case("sum_int64_past_double", {IntVals({9007199254740992.0, 1})},
           {{"dims", std::vector<int64_t>{}}, {"keepdim", false}});
  // Accumulated wider than half: 4096 ones (a float16 accumulator stalls at 2048, bfloat16 at 256).
  for (DType t : {kFloat16, kBFloat16})
    add_case(std::string("sum_ones_") + dtype_name(t), {Vals(V(4096, 1.0)).as(t).no_grad()},
             {{"dims", std::vector<int64_t>{}}, {"keepdim", false}})
        .expect({{4096}}, {0, 0});
  add_case("sum_int_big", {Ints({33, 65}, -9, 9)}, {{"dims", {0}}, {"keepdim", false}}).big();
  add_case("sum_bool_big", {Bools({33, 65})}, {{"dims", {1}}, {"keepdim", false}}).big();
  add_case("sum_wide", {U({3, 50257}, -1.7, 1.7)}, {{"dims", {1}}, {"keepdim", false}})
      .big()
      .cuda_tolerance([](DType t, const std::string&) {
        return t == kFloat32 ? Tol{1e-4, 1e-4} : scaled(tol_for(t), 8);
      });
  // A sum over rows with more than one block of columns, against the sum in double.
  add_case("sum_rows_600_columns", {U({37, 600}, -1.7, 1.7)}, {{"dims", {0}}, {"keepdim", false}})
      .big()
      .expect(
          [](const std::vector<V>& in) {
            V out(600, 0.0);
            for (size_t i = 0; i < in[0].size(); ++i) out[i % 600] += in[0][i];
            return std::vector<V>{out};
          },
          {0, 1e-5});
}

MG_OP_CASES(mean) {
  call([](const Tensors& x, const Args& a) { return mg::mean(x[0], ints_arg(a, "dims"), bool_arg(a, "keepdim")); });
  dims_cases(*this, true, 8);
  add_case("mean_expanded", {U({1, 4}).expand({3, 4})}, {{"dims", {0}}, {"keepdim", false}});
  add_case("mean_stepped", {U({6, 4}).slice(0, 1, 6, 2)}, {{"dims", {0}}, {"keepdim", true}});
  add_case("mean_values_all", {Vals(k123456, {2, 3})}, {{"dims", std::vector<int64_t>{}}, {"keepdim", false}})
      .expect({{3.5}});
  add_case("mean_values_0", {Vals(k123456, {2, 3})}, {{"dims", {0}}, {"keepdim", false}}).expect({{2.5, 3.5, 4.5}});
}

MG_OP_CASES(var) {
  call([](const Tensors& x, const Args& a) {
    return mg::var(x[0], ints_arg(a, "dims"), int_arg(a, "correction"), bool_arg(a, "keepdim"));
  });
  for (int64_t corr : {0, 1}) {
    for (const Dims& d : kDims) {
      Args args = dims_args(d);
      args["correction"] = corr;
      add_case("var" + dims_name(d) + "_c" + std::to_string(corr), {U({3, 4, 5})}, args);
    }
    add_case("var_dims_0_2_permuted_c" + std::to_string(corr), {permuted()},
             {{"dims", {0, 2}}, {"correction", corr}, {"keepdim", false}});
  }
  add_case("var_values_all", {Vals(k123456, {2, 3})},
           {{"dims", std::vector<int64_t>{}}, {"correction", 1}, {"keepdim", false}})
      .expect({{3.5}});  // the sample variance of 1..6
  add_case("var_values_1_c0", {Vals(k123456, {2, 3})}, {{"dims", {1}}, {"correction", 0}, {"keepdim", false}})
      .expect({{2.0 / 3, 2.0 / 3}});
}

MG_OP_CASES(amax) {
  call([](const Tensors& x, const Args& a) { return mg::amax(x[0], ints_arg(a, "dims"), bool_arg(a, "keepdim")); });
  dims_cases(*this);
  add_case("amax_values_0", {Vals(k123456, {2, 3})}, {{"dims", {0}}, {"keepdim", false}}).expect({{4, 5, 6}});
  const Args all{{"dims", std::vector<int64_t>{}}, {"keepdim", false}};
  add_case("amax_nan", {Vals({1, kNaN, 3, 2})}, all).expect({{kNaN}}).no_backward("NaN");
  add_case("amax_nan_first", {Vals({kNaN, 5})}, all).expect({{kNaN}}).no_backward("NaN");
  add_case("amax_nan_last", {Vals({5, kNaN})}, all).expect({{kNaN}}).no_backward("NaN");
  add_case("amax_nan_rows", {Vals({1, kNaN, 3, 4}, {2, 2})}, {{"dims", {1}}, {"keepdim", false}})
      .expect({{kNaN, 4}})
      .no_backward("NaN");
  add_case("amax_int32", {IntVals({7, -7, 2, 9}).as(kInt32)}, all).expect({{9}});
}

MG_OP_CASES(amin) {
  call([](const Tensors& x, const Args& a) { return mg::amin(x[0], ints_arg(a, "dims"), bool_arg(a, "keepdim")); });
  dims_cases(*this);
  add_case("amin_values_1", {Vals(k123456, {2, 3})}, {{"dims", {1}}, {"keepdim", false}}).expect({{1, 4}});
  const Args all{{"dims", std::vector<int64_t>{}}, {"keepdim", false}};
  add_case("amin_nan", {Vals({1, kNaN, 3, 2})}, all).expect({{kNaN}}).no_backward("NaN");
  add_case("amin_int32", {IntVals({7, -7, 2, 9}).as(kInt32)}, all).expect({{-7}});
}

namespace {
// max and min over one dim: values and indices.
void dim_cases(OpDef& op) {
  for (int64_t d : {0, 1, -1, 2})
    for (bool keep : {false, true})
      op.add_case(op.name() + "_" + (d < 0 ? "m1" : std::to_string(d)) + (keep ? "_keepdim" : ""), {U({3, 4, 5})},
                  {{"dim", d}, {"keepdim", keep}});
  op.add_case(op.name() + "_m2_permuted", {permuted()}, {{"dim", -2}, {"keepdim", false}});
  for (int64_t d : {0, 1, 2})
    op.add_case(op.name() + "_big_" + std::to_string(d), {big()}, {{"dim", d}, {"keepdim", false}}).big();
}
}  // namespace

MG_OP_CASES(max_dim) {
  call([](const Tensors& x, const Args& a) {
    auto r = mg::max(x[0], int_arg(a, "dim"), bool_arg(a, "keepdim"));
    return Tensors{r.values, r.indices};
  });
  dim_cases(*this);
  add_case("max_dim_ties", {Vals({3, 1, 3, 2, 5, 5}, {2, 3})}, {{"dim", 1}, {"keepdim", false}})
      .expect({{3, 5}, {0, 1}})  // ties: the first index
      .no_backward("ties");
  add_case("max_dim_nan", {Vals({1, kNaN, 3, 2})}, {{"dim", 0}, {"keepdim", false}})
      .expect({{kNaN}, {1}})
      .no_backward("NaN");
}

MG_OP_CASES(min_dim) {
  call([](const Tensors& x, const Args& a) {
    auto r = mg::min(x[0], int_arg(a, "dim"), bool_arg(a, "keepdim"));
    return Tensors{r.values, r.indices};
  });
  dim_cases(*this);
  add_case("min_dim_values_keepdim", {Vals({3, 1, 3, 2, 5, 5}, {2, 3})}, {{"dim", 0}, {"keepdim", true}})
      .expect({{2, 1, 3}, {1, 0, 0}});
}

MG_OP_CASES(max_all) {
  call([](const Tensors& x, const Args&) { return mg::max(x[0]); });
  add_case("max_all", {U({3, 4, 5})});
  add_case("max_all_values", {Vals(k123456, {2, 3})}).expect({{6}});
  add_case("max_all_nan", {Vals({1, kNaN, 3, 2})}).expect({{kNaN}}).no_backward("NaN");
}

MG_OP_CASES(min_all) {
  call([](const Tensors& x, const Args&) { return mg::min(x[0]); });
  add_case("min_all", {U({3, 4, 5})});
  add_case("min_all_values", {Vals(k123456, {2, 3})}).expect({{1}});
}

namespace {
void arg_cases(OpDef& op) {
  op.add_case(op.name() + "_1", {U({3, 4, 5})}, {{"dim", 1}, {"keepdim", false}});
  op.add_case(op.name() + "_last_keepdim_permuted", {permuted()}, {{"dim", -1}, {"keepdim", true}});
  for (int64_t d : {0, 1, 2})
    op.add_case(op.name() + "_big_" + std::to_string(d), {big()}, {{"dim", d}, {"keepdim", false}}).big();
}
}  // namespace

MG_OP_CASES(argmax) {
  call([](const Tensors& x, const Args& a) { return mg::argmax(x[0], int_arg(a, "dim"), bool_arg(a, "keepdim")); });
  arg_cases(*this);
  const Args dim0{{"dim", 0}, {"keepdim", false}};
  add_case("argmax_ties", {Vals({1, 7, 7, 7})}, dim0).expect({{1}});  // the first of equal maxima
  add_case("argmax_columns", {Vals({1, 9, 9, 0, 3, 0}, {3, 2})}, dim0).expect({{1, 0}});
  add_case("argmax_nan", {Vals({1, kNaN, 3, 2})}, dim0).expect({{1}});  // the NaN's index
  add_case("argmax_nan_first", {Vals({kNaN, 9, kNaN})}, dim0).expect({{0.0}});
  add_case("argmax_ties_and_nan", {Vals({1, 3, 3, 2, kNaN, 5, 0, 0}, {2, 4})}, {{"dim", 1}, {"keepdim", false}})
      .expect({{1, 0}});
}

MG_OP_CASES(argmin) {
  call([](const Tensors& x, const Args& a) { return mg::argmin(x[0], int_arg(a, "dim"), bool_arg(a, "keepdim")); });
  arg_cases(*this);
  const Args dim0{{"dim", 0}, {"keepdim", false}};
  add_case("argmin_ties", {Vals({4, 0, 0, 9})}, dim0).expect({{1}});
  add_case("argmin_nan", {Vals({3, 0, kNaN})}, dim0).expect({{2}});
  add_case("argmin_int32", {IntVals({7, -7, 2, 9}).as(kInt32)}, dim0).expect({{1}});
}

MG_OP_CASES(sum_to) {  // the inverse of broadcasting (backward rules use it)
  call([](const Tensors& x, const Args& a) { return mg::sum_to(x[0], ints_arg(a, "shape")); });
  add_case("sum_to_column", {U({2, 3, 4})}, {{"shape", {3, 1}}});
  add_case("sum_to_row", {U({2, 3, 4})}, {{"shape", {4}}});
  add_case("sum_to_values", {Vals(V(24, 1.0), {2, 3, 4})}, {{"shape", {3, 1}}}).expect({{8, 8, 8}});
}
