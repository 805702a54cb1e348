// Convolution and pooling (kernels/*/conv.*, cuDNN): conv2d (stride, padding, dilation, groups,
// depthwise; on cuda every variant: cuDNN and the im2col lowering), max_pool2d, avg_pool2d.
#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {

Args conv(std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
          std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1) {
  return {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}};
}
Args pool(std::vector<int64_t> kernel, std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0, 0}) {
  return {{"kernel", kernel}, {"stride", stride}, {"padding", padding}};
}

// cuDNN and the cpu sum in other orders (and cuDNN's Winograd and FFT algorithms transform the data
// first); 16-bit gradients of the lowering also round its intermediate matmul results.
Tol conv_tol(DType t, const std::string& variant) {
  const double f32 = variant == "im2col" ? 1e-4 : 3e-4;
  return t == kFloat32   ? Tol{f32, f32}
         : t == kFloat16 ? Tol{2e-2, 2e-2}
         : t == kFloat64 ? Tol{1e-10, 1e-10}
                         : Tol{4e-2, 4e-2};
}

Input weights(const Shape& s) { return U(s, -0.35, 0.35); }  // small, so 16-bit sums stay within tolerance
const std::string kConvAtol = "float32 accumulation of cancelling sums of products";

}  // namespace

MG_OP_CASES(conv2d) {  // inputs: x [N, C, H, W], weight [O, C/groups, kH, kW], bias (optional)
  call([](const Tensors& x, const Args& a) {
    return mg::conv2d(x[0], x[1], optional_input(x, 2), ints_arg(a, "stride"), ints_arg(a, "padding"),
                      ints_arg(a, "dilation"), int_arg(a, "groups"));
  });
  // Outputs and weight gradients are sums of 10-60 products of magnitude up to 4; where they cancel
  // to near zero, float32 accumulation leaves ~1e-6 absolute error whatever the order (PyTorch's own
  // float32 result reaches 0.66x of the default tolerance), so the absolute floor is 1e-5 here.
  defaults().torch_tolerance({1e-5, 1e-5}, kConvAtol).cuda_tolerance(conv_tol);
  add_case("conv2d_basic", {U({2, 3, 5, 6}), U({4, 3, 3, 2}), U({4})}, conv());
  add_case("conv2d_stride2_pad1", {U({1, 3, 7, 6}), U({4, 3, 3, 3}), U({4})}, conv({2, 2}, {1, 1}));
  add_case("conv2d_asymmetric_no_bias", {U({1, 2, 6, 7}), U({3, 2, 3, 2})}, conv({2, 1}, {1, 2}));
  add_case("conv2d_dilation2", {U({2, 2, 7, 7}), U({3, 2, 3, 3}), U({3})}, conv({1, 1}, {0, 0}, {2, 2}));
  add_case("conv2d_groups2", {U({1, 4, 6, 5}), U({6, 2, 3, 3}), U({6})}, conv({1, 1}, {1, 1}, {1, 1}, 2));
  add_case("conv2d_depthwise", {U({2, 3, 5, 5}), U({3, 1, 3, 3}), U({3})}, conv({1, 1}, {1, 1}, {1, 1}, 3));
  add_case("conv2d_depthwise_multiplier", {U({1, 3, 5, 6}), U({6, 1, 3, 3})}, conv({2, 2}, {0, 0}, {1, 1}, 3));
  add_case("conv2d_permuted_input", {U({2, 6, 5, 3}).permute({0, 3, 1, 2}), U({2, 3, 2, 2}), U({2})}, conv());
  add_case("conv2d_plain_3x3", {U({2, 2, 5, 4}), U({3, 2, 3, 3}), U({3})}, conv());
  add_case("conv2d_stride2_pad1_no_bias", {U({2, 2, 5, 5}), U({2, 2, 3, 3})}, conv({2, 2}, {1, 1}));
  add_case("conv2d_stride_1x2_pad_0x1", {U({2, 1, 5, 6}), U({2, 1, 2, 2}), U({2})}, conv({1, 2}, {0, 1}));
  add_case("conv2d_dilation2_pad_1x0", {U({2, 2, 6, 5}), U({2, 2, 2, 2}), U({2})}, conv({1, 1}, {1, 0}, {2, 2}));
  add_case("conv2d_groups2_small", {U({2, 4, 4, 4}), U({2, 2, 3, 3}), U({2})}, conv({1, 1}, {1, 1}, {1, 1}, 2));
  add_case("conv2d_depthwise_2x2", {U({2, 3, 4, 4}), U({3, 1, 2, 2})}, conv({1, 1}, {0, 0}, {1, 1}, 3));
  add_case("conv2d_groups3_dilation2", {U({2, 3, 6, 6}), U({6, 1, 3, 3})}, conv({1, 1}, {0, 0}, {2, 2}, 3));
  // An image of 0..15 and hand-checked sums.
  V img;
  for (int i = 0; i < 16; ++i) img.push_back(i);
  const Input image = Vals(img, {1, 1, 4, 4});
  add_case("conv2d_values_difference", {image, Vals({1, 0, 0, -1}, {1, 1, 2, 2})}, conv())
      .expect({V(9, -5)});  // x[i][j] - x[i+1][j+1]
  add_case("conv2d_values_padded_stride2", {image, Vals(V(18, 1.0), {2, 1, 3, 3}), Vals({0, 100})},
           conv({2, 2}, {1, 1}))
      .expect({{0 + 1 + 4 + 5, 1 + 2 + 3 + 5 + 6 + 7, 4 + 5 + 8 + 9 + 12 + 13, 5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15,
                110, 124, 151, 190}});
  V twice = img;  // channel 1 holds 2 * the image: one filter per group passes each channel on
  for (double v : img) twice.push_back(2 * v);
  add_case("conv2d_values_grouped", {Vals(twice, {1, 2, 4, 4}), Vals({1, 1}, {2, 1, 1, 1})},
           conv({1, 1}, {0, 0}, {1, 1}, 2))
      .expect({twice});
  add_case("conv2d_values_dilation2", {image, Vals(V(4, 1.0), {1, 1, 2, 2})}, conv({1, 1}, {0, 0}, {2, 2}))
      .expect({{20, 24, 36, 40}});  // x[i][j] + x[i][j+2] + x[i+2][j] + x[i+2][j+2]
  // The gpu's shapes: odd channels and sizes, every stride/padding/dilation/groups combination.
  struct Big {
    const char* name;
    Shape x, w;
    std::vector<int64_t> stride, padding, dilation;
    int64_t groups;
    bool bias;
  };
  for (const Big& b :
       {Big{"stride_2x1_dilation_1x2_groups2", {2, 6, 13, 11}, {8, 3, 3, 2}, {2, 1}, {1, 1}, {1, 2}, 2, true},
        Big{"same_padding_odd_channels", {3, 5, 17, 19}, {7, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
        Big{"depthwise_stride2", {2, 8, 15, 15}, {8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 8, false},
        Big{"depthwise_multiplier2", {2, 4, 10, 9}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4, true},
        Big{"1x1", {1, 4, 9, 7}, {6, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false},
        Big{"5x5_stride_3x2_pad_2x0_dilation_2x1", {2, 3, 20, 16}, {4, 3, 5, 5}, {3, 2}, {2, 0}, {2, 1}, 1, true},
        Big{"groups4_16_to_32", {4, 16, 12, 12}, {32, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4, true},
        Big{"stride5_past_a_4x4_window_pad3", {2, 2, 7, 7}, {3, 2, 4, 4}, {5, 5}, {3, 3}, {1, 1}, 1, true}}) {
    std::vector<Input> in{U(b.x, -1.7, 1.7), weights(b.w)};
    if (b.bias) in.push_back(U({b.w[0]}, -1.7, 1.7));
    add_case(std::string("conv2d_") + b.name, in, conv(b.stride, b.padding, b.dilation, b.groups)).big();
  }
  add_case("conv2d_transposed_input", {U({2, 6, 11, 13}, -1.7, 1.7).t(2, 3), weights({4, 6, 3, 3})},
           conv({1, 1}, {1, 1}))
      .big();
  add_case("conv2d_float64_stride2", {U({2, 3, 9, 8}, -1.7, 1.7), U({4, 3, 3, 3}, -1.7, 1.7)}, conv({2, 2}, {1, 1}))
      .big()
      .only({kFloat64});  // not a cuDNN dtype: it declines, and the lowering runs
  // float32 on TF32 tensor cores when allowed (10-bit mantissa inputs, float32 accumulation).
  add_case("conv2d_tf32", {U({4, 32, 17, 17}, -1.7, 1.7), U({64, 32, 3, 3}, -0.17, 0.17)}, conv({1, 1}, {1, 1}))
      .big()
      .only({kFloat32})
      .with_tf32()
      .cuda_tolerance([](DType, const std::string&) {
        return Tol{1e-2, 5e-2};
      });
}

namespace {
// Pooling: windows that always see a real element (padding below half the window); random values
// have no ties, where max's gradient would follow a convention.
void pool_cases(OpDef& op) {
  const std::string n = op.name();
  op.add_case(n + "_k2", {U({2, 2, 7, 5})}, pool({2, 2}));
  op.add_case(n + "_k3_s2_p1", {U({1, 2, 7, 6})}, pool({3, 3}, {2, 2}, {1, 1}));
  op.add_case(n + "_rect", {U({1, 2, 5, 7})}, pool({2, 3}, {1, 2}, {1, 1}));
  op.add_case(n + "_transposed", {U({1, 2, 6, 5}).t(2, 3)}, pool({2, 2}));
  op.add_case(n + "_overlapping", {U({2, 2, 5, 5})}, pool({3, 3}, {1, 2}));
  op.add_case(n + "_overlapping_3x2", {U({2, 2, 5, 5})}, pool({3, 2}, {1, 2}));
  op.add_case(n + "_padded_5x5", {U({2, 2, 5, 5})}, pool({3, 3}, {2, 2}, {1, 1}));
  op.add_case(n + "_big_3x2_s2x1_p1", {U({2, 6, 13, 11}, -1.7, 1.7)}, pool({3, 2}, {2, 1}, {1, 1})).big();
  op.add_case(n + "_big_3x3_s2_p1x0", {U({2, 6, 13, 11}, -1.7, 1.7)}, pool({3, 3}, {2, 2}, {1, 0})).big();
}
V arange16() {
  V v;
  for (int i = 0; i < 16; ++i) v.push_back(i);
  return v;
}
}  // namespace

MG_OP_CASES(max_pool2d) {
  call([](const Tensors& x, const Args& a) {
    return mg::max_pool2d(x[0], ints_arg(a, "kernel"), ints_arg(a, "stride"), ints_arg(a, "padding"));
  });
  pool_cases(*this);
  add_case("max_pool2d_values", {Vals(arange16(), {1, 1, 4, 4})}, pool({2, 2})).expect({{5, 7, 13, 15}});
  add_case("max_pool2d_values_3x3_s1", {Vals(arange16(), {1, 1, 4, 4})}, pool({3, 3}, {1, 1}))
      .expect({{10, 11, 14, 15}});
}

MG_OP_CASES(avg_pool2d) {
  call([](const Tensors& x, const Args& a) {
    return mg::avg_pool2d(x[0], ints_arg(a, "kernel"), ints_arg(a, "stride"), ints_arg(a, "padding"));
  });
  pool_cases(*this);
  add_case("avg_pool2d_values", {Vals(arange16(), {1, 1, 4, 4})}, pool({2, 2})).expect({{2.5, 4.5, 10.5, 12.5}});
}
