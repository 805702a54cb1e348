// Joining, splitting and indexing (kernels/*/index.*): cat, stack, split, split_with_sizes, chunk,
// gather, scatter (of a tensor or a value), scatter_add, index_select, index_add, one_hot,
// embedding, flip, repeat, tril, triu.
#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {
V range(int n) {
  V v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}
const Input kX = Vals({10, 11, 12, 20, 21, 22}, {2, 3});
Input big() { return U({23, 11, 6}, -1.7, 1.7); }  // the gpu's odd sizes
const char* const kTorchSrcLarger =
    "PyTorch 1.13's scatter backward returns src's gradient in index's shape, and its engine rejects it";
}  // namespace

MG_OP_CASES(cat) {
  call([](const Tensors& x, const Args& a) { return mg::cat(x, int_arg(a, "dim")); });
  add_case("cat_dim0", {U({2, 3}), U({4, 3}), U({1, 3})}, {{"dim", 0}});
  add_case("cat_dim1_transposed", {U({3, 2}).t(), U({2, 5})}, {{"dim", 1}});
  add_case("cat_neg_dim", {U({2, 3, 1}), U({2, 3, 2})}, {{"dim", -1}});
  add_case("cat_dim1_three", {U({2, 3}), U({2, 1}), U({2, 2})}, {{"dim", 1}});
  add_case("cat_dim0_transposed", {U({2, 3}), U({3, 4}).t()}, {{"dim", 0}});
  add_case("cat_values", {Vals({1, 2, 3, 4}, {2, 2}), Vals({5, 6}, {1, 2})}, {{"dim", 0}}).expect({{1, 2, 3, 4, 5, 6}});
  add_case("cat_values_transposed", {Vals({1, 2, 3, 4}, {2, 2}), Vals({5, 6}, {1, 2}).t()}, {{"dim", 1}})
      .expect({{1, 2, 5, 3, 4, 6}});
  add_case("cat_float_int", {Vals({1, 2, 3, 4}, {2, 2}), IntVals({7, 8}, {1, 2})}, {{"dim", 0}})
      .expect({{1, 2, 3, 4, 7, 8}});  // promotes to float32
  add_case("cat_big_narrowed", {big(), big().slice(1, 2, 7)}, {{"dim", 1}}).big();
}

MG_OP_CASES(stack) {
  call([](const Tensors& x, const Args& a) { return mg::stack(x, int_arg(a, "dim")); });
  add_case("stack_dim0", {U({3, 4}), U({3, 4}), U({3, 4})}, {{"dim", 0}});
  add_case("stack_last", {U({3, 4}), U({4, 3}).t()}, {{"dim", -1}});
  add_case("stack_values", {Vals({1, 2}), Vals({3, 4})}, {{"dim", 1}}).expect({{1, 3, 2, 4}});
}

MG_OP_CASES(split) {
  call([](const Tensors& x, const Args& a) { return mg::split(x[0], int_arg(a, "size"), int_arg(a, "dim")); });
  add_case("split_uneven", {U({7, 4})}, {{"size", 3}, {"dim", 0}});
  add_case("split_rows", {U({7, 3})}, {{"size", 3}, {"dim", 0}});
  add_case("split_one_part_used", {U({7, 3})}, {{"size", 3}, {"dim", 0}}).grad_of({1});  // zero gradient elsewhere
  add_case("split_values", {Vals(range(5))}, {{"size", 2}, {"dim", 0}}).expect({{0, 1}, {2, 3}, {4}});
}

MG_OP_CASES(split_with_sizes) {
  call([](const Tensors& x, const Args& a) {
    return mg::split_with_sizes(x[0], ints_arg(a, "sizes"), int_arg(a, "dim"));
  });
  add_case("split_with_sizes", {U({4, 6})}, {{"sizes", {1, 2, 3}}, {"dim", 1}});
  add_case("split_with_sizes_columns", {U({7, 3})}, {{"sizes", {1, 2}}, {"dim", 1}});
  add_case("split_with_sizes_values", {Vals(range(6))}, {{"sizes", {1, 5}}, {"dim", 0}}).expect({{0}, {1, 2, 3, 4, 5}});
}

MG_OP_CASES(chunk) {
  call([](const Tensors& x, const Args& a) { return mg::chunk(x[0], int_arg(a, "chunks"), int_arg(a, "dim")); });
  add_case("chunk_uneven", {U({8, 5})}, {{"chunks", 3}, {"dim", 0}});
  add_case("chunk_fewer", {U({2, 6})}, {{"chunks", 4}, {"dim", 1}});  // torch gives 3 chunks
  add_case("chunk_parts_0_2_used", {U({7, 3})}, {{"chunks", 3}, {"dim", 1}}).grad_of({0, 2});
  add_case("chunk_values", {Vals(range(6))}, {{"chunks", 3}, {"dim", 0}}).expect({{0, 1}, {2, 3}, {4, 5}});
}

MG_OP_CASES(gather) {
  call([](const Tensors& x, const Args& a) { return mg::gather(x[0], int_arg(a, "dim"), x[1]); });
  add_case("gather_dim1", {U({3, 5}), Ints({3, 4}, 0, 5)}, {{"dim", 1}});
  add_case("gather_dim0", {U({4, 3}), Ints({6, 2}, 0, 4)}, {{"dim", 0}});
  add_case("gather_transposed", {U({5, 3}).t(), Ints({3, 5}, 0, 5)}, {{"dim", 1}});
  add_case("gather_dim1_repeats", {U({3, 5}), IntVals({0, 4, 4, 1, 2, 2, 3, 0, 0}, {3, 3})}, {{"dim", 1}});
  add_case("gather_dim0_wider", {U({3, 5}), Ints({4, 5}, 0, 3)}, {{"dim", 0}});
  add_case("gather_dim0_row", {U({3, 5}), IntVals({2, 0, 2, 1, 1}, {1, 5})}, {{"dim", 0}});
  add_case("gather_3d", {U({2, 3, 4}), IntVals({0, 2, 1, 0}, {1, 1, 4})}, {{"dim", 1}});
  add_case("gather_values_dim1", {kX, IntVals({2, 2, 0, 1}, {2, 2})}, {{"dim", 1}}).expect({{12, 12, 20, 21}});
  add_case("gather_values_dim0", {kX, IntVals({1, 0, 1}, {1, 3})}, {{"dim", 0}}).expect({{20, 11, 22}});
  add_case("gather_zero_dim", {U({}), IntVals({0}, {})}, {{"dim", 0}});
  add_case("gather_big", {big(), Ints({23, 5, 6}, 0, 11)}, {{"dim", 1}}).big();
}

// scatter writes src at the index; repeated indices in a line would leave the winner unspecified
// (as in PyTorch), so its indices are distinct where they land in the same line.
MG_OP_CASES(scatter) {  // inputs: self, index, src
  call([](const Tensors& x, const Args& a) { return mg::scatter(x[0], int_arg(a, "dim"), x[1], x[2]); });
  const Input rows0 = IntVals({0, 1, 2, 0, 1, 2, 0, 1, 1, 0}, {2, 5});  // distinct in each column
  const Input cols1 = IntVals({4, 0, 2, 1, 3, 0, 0, 4, 3}, {3, 3});     // distinct in each row
  add_case("scatter_dim0", {U({3, 5}), rows0, U({2, 5})}, {{"dim", 0}});
  add_case("scatter_dim1", {U({3, 5}), cols1, U({3, 3})}, {{"dim", 1}});
  add_case("scatter_src_larger", {U({3, 5}), cols1, U({4, 6})}, {{"dim", -1}})  // src beyond index: no gradient
      .not_torch(kTorchSrcLarger);
  add_case("scatter_transposed", {U({5, 3}).t(), cols1, U({3, 3}).t()}, {{"dim", 1}});
  add_case("scatter_3d", {U({2, 3, 4}), IntVals({2, 0, 1, 1, 2, 0}, {1, 2, 3}), U({1, 2, 3})}, {{"dim", 2}});
  add_case("scatter_zero_dim", {U({}), IntVals({0}, {}), U({})}, {{"dim", 0}});
  add_case("scatter_values", {Vals(V(6, 0.0), {2, 3}), IntVals({2, 0, 1, 2}, {2, 2}), Vals({1, 2, 3, 4}, {2, 2})},
           {{"dim", 1}})
      .expect({{2, 0, 1, 0, 3, 4}});
  add_case("scatter_int32", {IntVals({0, 0, 0}).as(kInt32), IntVals({2, 0}), IntVals({5, 6}).as(kInt32)}, {{"dim", 0}})
      .expect({{6, 0, 5}});
  add_case("scatter_big", {big(), Ints({23, 1, 6}, 0, 11), U({23, 2, 6})}, {{"dim", 1}}).big();
}

MG_OP_CASES(scatter_value) {  // scatter of a scalar: self, index
  call([](const Tensors& x, const Args& a) {
    return mg::scatter(x[0], int_arg(a, "dim"), x[1], scalar_arg(a, "value"));
  });
  add_case("scatter_value_dim1", {U({3, 5}), Ints({3, 2}, 0, 5)}, {{"dim", 1}, {"value", -1.5}});
  add_case("scatter_value_dim0", {U({4, 3}), Ints({2, 3}, 0, 4)}, {{"dim", 0}, {"value", 2.0}});
  add_case("scatter_value_values", {Vals(V(4, 1.0), {2, 2}), IntVals({1, 1}, {2, 1})}, {{"dim", 1}, {"value", 7.0}})
      .expect({{1, 7, 1, 7}});
}

MG_OP_CASES(scatter_add) {  // inputs: self, index, src; repeated indices add up
  call([](const Tensors& x, const Args& a) { return mg::scatter_add(x[0], int_arg(a, "dim"), x[1], x[2]); });
  add_case("scatter_add_dim0", {U({3, 5}), Ints({4, 5}, 0, 3), U({4, 5})}, {{"dim", 0}});
  add_case("scatter_add_dim1", {U({3, 5}), Ints({3, 7}, 0, 5), U({3, 7})}, {{"dim", 1}});
  add_case("scatter_add_src_larger", {U({3, 5}), Ints({2, 4}, 0, 5), U({3, 6})}, {{"dim", 1}})
      .not_torch(kTorchSrcLarger);
  add_case("scatter_add_transposed", {U({5, 3}).t(), Ints({3, 5}, 0, 5), U({5, 3}).t()}, {{"dim", 1}});
  add_case("scatter_add_zero_dim", {U({}), IntVals({0}, {}), U({})}, {{"dim", -1}});
  add_case("scatter_add_values", {Vals(V(3, 0.0)), IntVals({0, 2, 0, 0}), Vals({1, 2, 3, 4})}, {{"dim", 0}})
      .expect({{8, 0, 2}});
  add_case("scatter_add_int64", {IntVals({1, 1}), IntVals({1, 1, 0}), IntVals({5, 6, 7})}, {{"dim", 0}})
      .expect({{8, 12}});
  add_case("scatter_add_big", {big(), Ints({23, 30, 6}, 0, 11), U({23, 30, 6})}, {{"dim", 1}})
      .big()
      .cuda_tolerance(4);  // atomic adds in any order
}

MG_OP_CASES(index_select) {
  call([](const Tensors& x, const Args& a) { return mg::index_select(x[0], int_arg(a, "dim"), x[1]); });
  add_case("index_select_dim0", {U({5, 4}), IntVals({3, 0, 3, 1})}, {{"dim", 0}});
  add_case("index_select_dim1", {U({3, 6}), IntVals({5, 5, 2})}, {{"dim", 1}});
  add_case("index_select_dim1_repeats", {U({3, 5}), IntVals({4, 0, 4, 2})}, {{"dim", 1}});
  add_case("index_select_dim0_repeats", {U({3, 5}), IntVals({1, 1, 0})}, {{"dim", 0}});
  add_case("index_select_3d_dim1", {U({2, 3, 4}), IntVals({2, 0})}, {{"dim", 1}});
  add_case("index_select_values_dim1", {kX, IntVals({2, 0, 2})}, {{"dim", 1}}).expect({{12, 10, 12, 22, 20, 22}});
  add_case("index_select_values_dim0", {kX, IntVals({1})}, {{"dim", 0}}).expect({{20, 21, 22}});
  add_case("index_select_big_dim0", {big(), IntVals({3, 0, 22, 3, 3, 17, 9})}, {{"dim", 0}}).big();
  add_case("index_select_big_dim2", {big(), IntVals({5, 5, 1, 0})}, {{"dim", 2}}).big();
}

MG_OP_CASES(index_add) {  // inputs: self, index, source; self with alpha * source[k] added at index[k]
  call([](const Tensors& x, const Args& a) {
    return mg::index_add(x[0], int_arg(a, "dim"), x[1], x[2], scalar_arg(a, "alpha"));
  });
  add_case("index_add_dim0", {U({5, 4}), IntVals({3, 0, 3}), U({3, 4})}, {{"dim", 0}, {"alpha", 1}});
  add_case("index_add_dim1_alpha", {U({3, 6}), IntVals({5, 5, 2, 0}), U({3, 4})}, {{"dim", 1}, {"alpha", 2.5}});
  add_case("index_add_transposed", {U({6, 3}).t(), IntVals({1, 4}), U({2, 3}).t()}, {{"dim", -1}, {"alpha", -1}});
  add_case("index_add_3d", {U({2, 3, 4}), IntVals({2, 0, 2, 1, 2}), U({2, 5, 4})}, {{"dim", 1}, {"alpha", 1}});
  add_case("index_add_values", {kX, IntVals({1, 1}), Vals({1, 2, 3, 4, 5, 6}, {2, 3})}, {{"dim", 0}, {"alpha", 1}})
      .expect({{10, 11, 12, 25, 28, 31}});
  add_case("index_add_int64", {IntVals({1, 2, 3}), IntVals({0, 0}), IntVals({10, 20})}, {{"dim", 0}, {"alpha", 2}})
      .expect({{61, 2, 3}});
  add_case("index_add_big", {big(), IntVals({3, 0, 22, 3, 3, 17, 9}), U({7, 11, 6})}, {{"dim", 0}, {"alpha", 1}})
      .big()
      .cuda_tolerance(4);
}

MG_OP_CASES(one_hot) {  // int64 [..., num_classes]; num_classes = -1 (read from the values) is not on meta
  call([](const Tensors& x, const Args& a) { return mg::one_hot(x[0], int_arg(a, "num_classes")); });
  add_case("one_hot", {Ints({7}, 0, 5)}, {{"num_classes", 5}});
  add_case("one_hot_2d", {Ints({3, 4}, 0, 6)}, {{"num_classes", 6}});
  add_case("one_hot_values", {IntVals({2, 0, 2})}, {{"num_classes", 3}}).expect({{0, 0, 1, 1, 0, 0, 0, 0, 1}});
  add_case("one_hot_zero_dim", {IntVals({1}, {})}, {{"num_classes", 2}}).expect({{0, 1}});
  add_case("one_hot_empty", {IntVals({}, {0})}, {{"num_classes", 4}});
  add_case("one_hot_big", {Ints({33, 65}, 0, 257)}, {{"num_classes", 257}}).big();
}

MG_OP_CASES(embedding) {  // inputs: weight, indices
  call([](const Tensors& x, const Args&) { return mg::embedding(x[0], x[1]); });
  add_case("embedding", {U({10, 4}), Ints({2, 3}, 0, 10)});
  add_case("embedding_repeats", {U({6, 3}), IntVals({1, 1, 4, 5, 1, 0}, {2, 3})});
  add_case("embedding_repeats_first_last", {U({6, 3}), IntVals({0, 5, 5, 2, 0, 3}, {2, 3})});
  add_case("embedding_column", {U({4, 5}), IntVals({0, 3, 3}, {3, 1})});
  add_case("embedding_values", {kX, IntVals({1, 1, 0, 1}, {2, 2})})
      .expect({{20, 21, 22, 20, 21, 22, 10, 11, 12, 20, 21, 22}});
  add_case("embedding_big", {U({50, 16}, -1.7, 1.7), Ints({4, 33}, 0, 50)}).big();
}

MG_OP_CASES(flip) {
  call([](const Tensors& x, const Args& a) { return mg::flip(x[0], ints_arg(a, "dims")); });
  add_case("flip_0", {U({3, 4, 5})}, {{"dims", {0}}});
  add_case("flip_1_2", {U({3, 4, 5})}, {{"dims", {1, 2}}});
  add_case("flip_all", {U({3, 4, 5})}, {{"dims", {-1, 0, 1}}});
  add_case("flip_transposed", {U({5, 3}).t()}, {{"dims", {1}}});
  add_case("flip_stepped", {U({8, 3}).slice(0, 1, 8, 3)}, {{"dims", {0}}});
  add_case("flip_expanded", {U({1, 4}).expand({3, 4})}, {{"dims", {1}}});
  add_case("flip_values", {kX}, {{"dims", {1}}}).expect({{12, 11, 10, 22, 21, 20}});
  add_case("flip_int32", {IntVals({1, 2, 3}).as(kInt32)}, {{"dims", {0}}}).expect({{3, 2, 1}});
  add_case("flip_empty", {U({0, 3})}, {{"dims", {0, 1}}});
  add_case("flip_big", {big()}, {{"dims", {0, 2}}}).big();
  add_case("flip_big_transposed", {big().t(0, 2)}, {{"dims", {1}}}).big();
}

MG_OP_CASES(repeat) {  // Tensor::repeat: tiles; leading repeats add dims; the gradient sums the tiles
  call([](const Tensors& x, const Args& a) { return x[0].repeat(ints_arg(a, "repeats")); });
  add_case("repeat_rows", {U({2, 3})}, {{"repeats", {3, 1}}});
  add_case("repeat_both", {U({2, 3})}, {{"repeats", {2, 2}}});
  add_case("repeat_new_dims", {U({2, 3})}, {{"repeats", {2, 1, 3}}});
  add_case("repeat_1d", {U({4})}, {{"repeats", {3}}});
  add_case("repeat_transposed", {U({3, 2}).t()}, {{"repeats", {1, 2}}});
  add_case("repeat_expanded", {U({1, 3}).expand({2, 3})}, {{"repeats", {2, 1}}});
  add_case("repeat_zero", {U({2, 3})}, {{"repeats", {0, 2}}});
  add_case("repeat_zero_dim", {U({})}, {{"repeats", {2, 2}}});
  add_case("repeat_values", {Vals({1, 2})}, {{"repeats", {2, 2}}}).expect({{1, 2, 1, 2, 1, 2, 1, 2}});
  add_case("repeat_bool", {Vals({1, 0}).as(kBool)}, {{"repeats", {2}}}).expect({{1, 0, 1, 0}});
  add_case("repeat_big", {big()}, {{"repeats", {2, 1, 3}}}).big();
}

namespace {
using Triangle = Tensor (*)(const Tensor&, int64_t);
void triangle_cases(OpDef& op, Triangle f) {
  op.call([f](const Tensors& x, const Args& a) { return f(x[0], int_arg(a, "diagonal")); });
  const std::string n = op.name();
  for (int64_t d : {0, 1, -1, 2})
    op.add_case(n + "_" + (d < 0 ? "m1" : std::to_string(d)), {U({4, 5})}, {{"diagonal", d}});
  op.add_case(n + "_batched", {U({2, 3, 4})}, {{"diagonal", 0}});
  op.add_case(n + "_batched_square", {U({2, 3, 3})}, {{"diagonal", 0}});
  op.add_case(n + "_transposed", {U({5, 4}).t()}, {{"diagonal", 1}});
  op.add_case(n + "_big_selected", {big().select(2, 1)}, {{"diagonal", 1}}).big();
}
}  // namespace

MG_OP_CASES(tril) {
  triangle_cases(*this, mg::tril);
  add_case("tril_values", {Vals(V(9, 1.0), {3, 3})}, {{"diagonal", 0}}).expect({{1, 0, 0, 1, 1, 0, 1, 1, 1}});
  add_case("tril_values_m1", {Vals(V(9, 1.0), {3, 3})}, {{"diagonal", -1}}).expect({{0, 0, 0, 1, 0, 0, 1, 1, 0}});
}

MG_OP_CASES(triu) {
  triangle_cases(*this, mg::triu);
  add_case("triu_values_1", {Vals(V(9, 1.0), {3, 3})}, {{"diagonal", 1}}).expect({{0, 1, 1, 0, 0, 1, 0, 0, 0}});
}
