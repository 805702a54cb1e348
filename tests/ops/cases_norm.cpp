// Normalisation (kernels/*/norm.*): layer_norm, rms_norm, group_norm on layer_norm's kernels, batch_norm.
#include <cmath>

#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

MG_OP_CASES(layer_norm) {
  call([](const Tensors& x, const Args& a) {
    return layer_norm(x[0], ints_arg(a, "normalized_shape"), optional_input(x, 1), optional_input(x, 2),
                      float_arg(a, "eps"));
  });
  defaults().cuda_tolerance(4);  // two reductions per row, summed in another order on the gpu
  auto ln = [](Shape s, double eps = 1e-5) { return Args{{"normalized_shape", s}, {"eps", eps}}; };
  add_case("layer_norm_affine", {U({3, 4, 6}), U({6}), U({6})}, ln({6}));
  add_case("layer_norm_plain_2d", {U({3, 4, 6})}, ln({4, 6}));
  add_case("layer_norm_weight_only_eps", {U({5, 7}), U({7})}, ln({7}, 1e-3));
  add_case("layer_norm_transposed", {U({6, 4}).t(), U({6}), U({6})}, ln({6}));
  add_case("layer_norm_affine_2d_eps", {U({2, 3, 4}), U({3, 4}), U({3, 4})}, ln({3, 4}, 1e-3));
  add_case("layer_norm_transposed_plain", {U({3, 4}).t()}, ln({3}));
  // Rows [1, 2, 3] (mean 2, variance 2/3) and [5, 5, 5] (variance 0: the output is the bias).
  const double r = 1 / std::sqrt(2.0 / 3 + 1e-5);
  add_case("layer_norm_values", {Vals({1, 2, 3, 5, 5, 5}, {2, 3})}, ln({3}))
      .expect({{-r, 0, r, 0, 0, 0}}, {1e-5, 1e-5})
      .no_backward("a constant row: finite differences of 1/sqrt(var + eps) at var = 0 are not a reference");
  add_case("layer_norm_values_affine", {Vals({1, 2, 3, 5, 5, 5}, {2, 3}), Vals({1, 2, 3}), Vals({0, 0, 1})}, ln({3}))
      .expect({{-r, 0, 3 * r + 1, 0, 0, 1}}, {1e-5, 1e-5})
      .no_backward("a constant row: finite differences of 1/sqrt(var + eps) at var = 0 are not a reference");
  add_case("layer_norm_values_eps0", {Vals({1, 3}, {1, 2, 1})}, ln({2, 1}, 0)).expect({{-1, 1}});
  add_case("layer_norm_bf16_ones", {Vals(V(16, 1.0), {2, 8}).as(kBFloat16)}, ln({8}))
      .expect({V(16, 0.0)})
      .no_backward("constant rows");
  // Rows below a warp, not a multiple of the vector width, larger than a block; both variants.
  for (int64_t n : {1, 33, 768, 1025}) {
    const std::string s = std::to_string(n);
    add_case("layer_norm_n" + s, {U({3, 41, n}, -2.4, 4.4), U({n}, -1.7, 1.7), U({n}, -1.7, 1.7)}, ln({n})).big();
    add_case("layer_norm_plain_n" + s, {U({3, 41, n}, -2.4, 4.4)}, ln({n})).big();
  }
}

// ---- rms_norm: x / sqrt(mean(x^2) + eps) * weight over the trailing dims (LLaMA's RMSNorm)
MG_OP_CASES(rms_norm) {
  call([](const Tensors& x, const Args& a) {
    return rms_norm(x[0], ints_arg(a, "normalized_shape"), optional_input(x, 1), float_arg(a, "eps"));
  });
  defaults().cuda_tolerance(4);  // a reduction per row (two in backward), summed in another order on the gpu
  auto rn = [](Shape s, double eps = 1e-6) { return Args{{"normalized_shape", s}, {"eps", eps}}; };
  add_case("rms_norm_weight", {U({3, 4, 6}), U({6})}, rn({6}));
  add_case("rms_norm_plain", {U({5, 7})}, rn({7}, 1e-3));
  add_case("rms_norm_2d_shape", {U({2, 3, 4}), U({3, 4})}, rn({3, 4}));
  add_case("rms_norm_transposed", {U({6, 4}).t(), U({6})}, rn({6}));
  add_case("rms_norm_broadcast_weight", {U({3, 5}), U({1}).expand({5})}, rn({5}));
  add_case("rms_norm_empty", {U({0, 5}), U({5})}, rn({5}));
  // Rows [3, 4] (mean square 12.5) and [0, -2] (mean square 2), weight [1, 2], eps 0.
  const double r1 = 1 / std::sqrt(12.5), r2 = 1 / std::sqrt(2.0);
  add_case("rms_norm_values", {Vals({3, 4, 0, -2}, {2, 2}), Vals({1, 2})}, rn({2}, 0))
      .expect({{3 * r1, 8 * r1, 0, -4 * r2}}, {1e-6, 1e-6});
  add_case("rms_norm_formula", {U({4, 9}, -3, 3), U({9})}, rn({9}, 0.25)).expect([](const std::vector<V>& in) {
    V y(in[0].size());
    for (size_t i = 0; i < 4; ++i) {
      double ms = 0;
      for (size_t j = 0; j < 9; ++j) ms += in[0][i * 9 + j] * in[0][i * 9 + j] / 9;
      for (size_t j = 0; j < 9; ++j) y[i * 9 + j] = in[0][i * 9 + j] / std::sqrt(ms + 0.25) * in[1][j];
    }
    return std::vector<V>{y};
  });
  // Rows below a warp, not a multiple of the vector width, larger than a block; tall enough that the
  // cuda backward's weight sums run in slices through scratch.
  for (int64_t n : {1, 33, 768, 1025})
    add_case("rms_norm_n" + std::to_string(n), {U({3, 41, n}, -2.4, 4.4), U({n}, -1.7, 1.7)}, rn({n})).big();
  add_case("rms_norm_tall", {U({1024, 64}, -2.4, 4.4), U({64})}, rn({64})).big();
}

MG_OP_CASES(group_norm) {  // inputs: x [N, C, ...], weight [C], bias [C] (optional)
  call([](const Tensors& x, const Args& a) {
    return group_norm(x[0], int_arg(a, "num_groups"), optional_input(x, 1), optional_input(x, 2), float_arg(a, "eps"));
  });
  defaults().cuda_tolerance(4);  // layer_norm's kernels
  auto gn = [](int64_t groups, double eps = 1e-5) { return Args{{"num_groups", groups}, {"eps", eps}}; };
  add_case("group_norm_affine", {U({2, 6, 3, 4}), U({6}), U({6})}, gn(3));
  add_case("group_norm_plain", {U({2, 4, 5})}, gn(2));
  add_case("group_norm_one_group", {U({3, 4, 2}), U({4})}, gn(1, 1e-3));
  add_case("group_norm_per_channel", {U({2, 3, 5}), U({3}), U({3})}, gn(3));  // instance norm
  add_case("group_norm_2d_input", {U({4, 6}), U({6}), U({6})}, gn(2));
  add_case("group_norm_permuted", {U({3, 4, 2, 6}).permute({0, 3, 1, 2}), U({6}), U({6})}, gn(3));
  // Channels [1, 3] and [2, 4] in one group of [1, 2, 3, 4]: mean 2.5, variance 1.25.
  const double r = 1 / std::sqrt(1.25 + 1e-5);
  add_case("group_norm_values", {Vals({1, 3, 2, 4}, {1, 2, 2})}, gn(1))
      .expect({{-1.5 * r, 0.5 * r, -0.5 * r, 1.5 * r}}, {1e-5, 1e-5});
  add_case("group_norm_big", {U({4, 32, 7, 9}, -2.4, 4.4), U({32}), U({32})}, gn(8)).big();
}

MG_OP_CASES(batch_norm) {
  // x, then weight and bias (optional); training normalizes with the batch's statistics, eval with
  // running ones made from the case's arguments (the op updates running statistics in place, so they
  // are not inputs: gradcheck runs the forward many times). PyTorch's values are checked in
  // tests/nn/test_batchnorm.cpp (BatchNorm1d/2d against fixtures, train and eval).
  call([](const Tensors& x, const Args& a) {
    const bool training = bool_arg(a, "training");
    const int64_t C = x[0].size(1);
    const TensorOptions stat = TensorOptions(kFloat32).device(x[0].device());
    Tensor mean, var;
    if (!training) mean = full({C}, 0.25, stat), var = full({C}, 1.5, stat);
    return batch_norm(x[0], mean, var, optional_input(x, 1), optional_input(x, 2), training, 0.1, float_arg(a, "eps"));
  });
  defaults().not_torch("checked against PyTorch fixtures in tests/nn/test_batchnorm.cpp").cuda_tolerance(4);
  auto bn = [](bool training, double eps = 1e-5) { return Args{{"training", training}, {"eps", eps}}; };
  add_case("batch_norm_2d_affine", {U({4, 3, 5, 2}), U({3}), U({3})}, bn(true));
  add_case("batch_norm_1d_plain", {U({6, 4})}, bn(true, 1e-3));
  add_case("batch_norm_1d_seq_weight_only", {U({3, 2, 7}), U({2})}, bn(true));
  add_case("batch_norm_transposed", {U({5, 4}).t().t(), U({4}), U({4})}, bn(true));
  add_case("batch_norm_channels_last_view", {U({2, 5, 4, 3}).permute({0, 3, 1, 2}), U({3}), U({3})}, bn(true));
  add_case("batch_norm_eval", {U({4, 3, 5}), U({3}), U({3})}, bn(false));
  // Per channel (2 channels of [1, 3] and [5, 5]): mean 2 and 5, biased variance 1 and 0.
  const double s = 1 / std::sqrt(1 + 1e-5);
  add_case("batch_norm_values", {Vals({1, 5, 3, 5}, {2, 2})}, bn(true))
      .expect({{-s, 0, s, 0}}, {1e-6, 1e-6})
      .no_backward("a constant channel: finite differences of 1/sqrt(var + eps) at var = 0 are not a reference");
  add_case("batch_norm_big", {U({16, 24, 17, 9}, -2.4, 4.4), U({24}), U({24})}, bn(true)).big();
}

// ---- add_layer_norm: (x + residual, layer_norm(x + residual)), the residual stream's add and the
// next layer norm in one op
MG_OP_CASES(add_layer_norm) {
  call([](const Tensors& x, const Args& a) {
    auto [sum, y] = add_layer_norm(x[0], x[1], ints_arg(a, "normalized_shape"), optional_input(x, 2),
                                   optional_input(x, 3), float_arg(a, "eps"));
    return Tensors{sum, y};
  });
  defaults().cuda_tolerance(4);  // layer_norm's: two reductions per row in another order
  auto ln = [](Shape s, double eps = 1e-5) { return Args{{"normalized_shape", s}, {"eps", eps}}; };
  add_case("add_layer_norm_affine", {U({3, 4, 6}), U({3, 4, 6}), U({6}), U({6})}, ln({6}));
  add_case("add_layer_norm_plain_2d", {U({3, 4, 6}), U({3, 4, 6})}, ln({4, 6}));
  add_case("add_layer_norm_weight_only", {U({5, 7}), U({5, 7}), U({7})}, ln({7}, 1e-3));
  add_case("add_layer_norm_transposed", {U({6, 4}).t(), U({4, 6}), U({6}), U({6})}, ln({6}));
  add_case("add_layer_norm_sum_only", {U({3, 5}), U({3, 5}), U({5}), U({5})}, ln({5})).grad_of({0});
  add_case("add_layer_norm_normalized_only", {U({3, 5}), U({3, 5}), U({5}), U({5})}, ln({5})).grad_of({1});
  add_case("add_layer_norm_empty", {U({0, 5}), U({0, 5}), U({5}), U({5})}, ln({5}));
  for (int64_t n : {1, 33, 768, 1025})
    add_case("add_layer_norm_n" + std::to_string(n), {U({3, 41, n}, -2.4, 4.4), U({3, 41, n}), U({n}), U({n})}, ln({n}))
        .big();
}
