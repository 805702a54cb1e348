// Views and copies (no kernels of their own but strided copies and casts): view, reshape,
// transpose, permute, narrow, slice, select, expand, squeeze, unsqueeze, flatten, contiguous,
// clone, to(dtype).
#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {
Input x234() { return U({2, 3, 4}); }
}  // namespace

MG_OP_CASES(view) {
  call([](const Tensors& x, const Args& a) { return x[0].view(ints_arg(a, "shape")); });
  add_case("view", {x234()}, {{"shape", {6, 4}}});
  add_case("view_infer", {x234()}, {{"shape", {4, -1}}});
  add_case("view_big", {U({67, 45}, -1.7, 1.7)}, {{"shape", {45, 67}}}).big();
}

MG_OP_CASES(reshape) {  // a view when strides allow, else a copy
  call([](const Tensors& x, const Args& a) { return x[0].reshape(ints_arg(a, "shape")); });
  add_case("reshape_view", {x234()}, {{"shape", {3, 8}}});
  add_case("reshape_copy", {x234().t(0, 2)}, {{"shape", {-1}}});
  add_case("reshape_copy_big", {U({67, 45}, -1.7, 1.7).t()}, {{"shape", {-1}}}).big();
}

MG_OP_CASES(transpose) {
  call([](const Tensors& x, const Args& a) { return x[0].transpose(int_arg(a, "dim0"), int_arg(a, "dim1")); });
  add_case("transpose_0_2", {x234()}, {{"dim0", 0}, {"dim1", 2}});
  add_case("transpose_negative", {x234()}, {{"dim0", -1}, {"dim1", 1}});
}

MG_OP_CASES(permute) {
  call([](const Tensors& x, const Args& a) { return x[0].permute(ints_arg(a, "dims")); });
  add_case("permute_2_0_1", {x234()}, {{"dims", {2, 0, 1}}});
  add_case("permute_1_2_0", {x234()}, {{"dims", {1, 2, 0}}});
}

MG_OP_CASES(narrow) {
  call([](const Tensors& x, const Args& a) {
    return x[0].narrow(int_arg(a, "dim"), int_arg(a, "start"), int_arg(a, "length"));
  });
  add_case("narrow", {x234()}, {{"dim", 2}, {"start", 1}, {"length", 2}});
}

MG_OP_CASES(slice) {
  call([](const Tensors& x, const Args& a) {
    return x[0].slice(int_arg(a, "dim"), int_arg(a, "start"), int_arg(a, "end"), int_arg(a, "step"));
  });
  add_case("slice_step", {x234()}, {{"dim", 2}, {"start", 0}, {"end", 4}, {"step", 3}});
  add_case("slice_negative_start", {x234()}, {{"dim", 1}, {"start", -2}, {"end", 3}, {"step", 1}});
}

MG_OP_CASES(select) {
  call([](const Tensors& x, const Args& a) { return x[0].select(int_arg(a, "dim"), int_arg(a, "index")); });
  add_case("select", {x234()}, {{"dim", 1}, {"index", 2}});
  add_case("select_negative", {x234()}, {{"dim", -1}, {"index", -1}});
}

MG_OP_CASES(expand) {  // -1 keeps a size; new leading dims
  call([](const Tensors& x, const Args& a) { return x[0].expand(ints_arg(a, "shape")); });
  add_case("expand", {U({2, 1})}, {{"shape", {3, 2, 4}}});
  add_case("expand_new_dims", {U({4, 1})}, {{"shape", {2, -1, 3}}});
  add_case("expand_column", {U({3, 1})}, {{"shape", {5, 3, 7}}});
}

MG_OP_CASES(squeeze) {
  call([](const Tensors& x, const Args& a) {
    return null_arg(a, "dim") ? x[0].squeeze() : x[0].squeeze(int_arg(a, "dim"));
  });
  add_case("squeeze_all", {U({1, 3, 1, 2})}, {{"dim", nullptr}});
  add_case("squeeze_dim", {U({1, 3, 1, 2})}, {{"dim", 2}});
  add_case("squeeze_column", {U({3, 1})}, {{"dim", nullptr}});
}

MG_OP_CASES(unsqueeze) {
  call([](const Tensors& x, const Args& a) { return x[0].unsqueeze(int_arg(a, "dim")); });
  add_case("unsqueeze", {U({3, 4})}, {{"dim", 1}});
  add_case("unsqueeze_last", {x234()}, {{"dim", -1}});
  add_case("unsqueeze_of_a_view", {U({3, 4}).t().slice(0, 1, 3)}, {{"dim", 0}});
}

MG_OP_CASES(flatten) {
  call([](const Tensors& x, const Args& a) { return x[0].flatten(int_arg(a, "start"), int_arg(a, "end")); });
  add_case("flatten_from_1", {x234()}, {{"start", 1}, {"end", -1}});
  add_case("flatten_transposed", {x234().t(0, 1)}, {{"start", 0}, {"end", -1}});
}

MG_OP_CASES(contiguous) {
  call([](const Tensors& x, const Args&) { return x[0].contiguous(); });
  add_case("contiguous_of_transposed", {U({3, 4}).t()});
  add_case("contiguous_of_contiguous", {U({3, 4})});
  add_case("contiguous_big", {U({67, 45}, -1.7, 1.7).t()}).big();
}

MG_OP_CASES(clone) {
  call([](const Tensors& x, const Args&) { return x[0].clone(); });
  add_case("clone", {U({3, 4})});
  add_case("clone_stepped", {U({3, 4}).slice(1, 0, 4, 2)});
}

MG_OP_CASES(to) {  // dtype conversion; a round trip through a narrower type rounds, so the steps are large
  call([](const Tensors& x, const Args& a) { return x[0].to(dtype_named(string_arg(a, "dtype"))); });
  add_case("to_float32", {U({3, 4})}, {{"dtype", "float32"}}).gradcheck_options(1e-3, 1e-3, 1e-3);
  add_case("to_float16", {U({3, 4})}, {{"dtype", "float16"}}).gradcheck_options(5e-2, 3e-2, 1e-2);
  add_case("to_bfloat16", {U({3, 4})}, {{"dtype", "bfloat16"}}).gradcheck_options(5e-2, 3e-1, 1e-1);
  add_case("to_float64", {U({3, 4})}, {{"dtype", "float64"}});
  add_case("to_float16_transposed", {U({5, 3}).t()}, {{"dtype", "float16"}}).gradcheck_options(5e-2, 3e-2, 1e-2);
}
