// Joining, splitting and indexing (kernels/*/index.*): cat, stack, split, split_with_sizes, chunk,
// gather, index_select, embedding, tril, triu.
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
  add_case("gather_big", {big(), Ints({23, 5, 6}, 0, 11)}, {{"dim", 1}}).big();
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
