// Every CUDA kernel against the CPU backend on random inputs: odd and large sizes, views that
// are not contiguous, float32 and the 16-bit types; forward and backward through the ops.
#include "gpu_util.h"

using namespace gpu_test;

namespace {
const DType kFloats[] = {kFloat32, kFloat16, kBFloat16};
}

TEST_CASE("cuda: copies and casts between every pair of dtypes, strided and broadcast") {
  manual_seed(1);
  Tensor base = (randn({37, 61}) * 40.0);
  for (DType from : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kBool}) {
    Tensor src = base.to(from);
    Tensor on_gpu = src.to(kGPU);
    expect_equal(on_gpu, src, "round trip");
    for (DType to : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kBool}) {
      std::string what = std::string(dtype_name(from)) + " -> " + dtype_name(to);
      expect_equal(on_gpu.to(to), src.to(to), what);
      expect_equal(on_gpu.t().to(to).contiguous(), src.t().to(to).contiguous(), what + " transposed");
    }
  }
  Tensor row = randn({1, 61});
  Tensor dst = zeros({37, 61}, kGPU);
  dst.copy_(row.to(kGPU));
  expect_equal(dst, row.expand({37, 61}).contiguous(), "copy_ broadcast");
  expect_equal(base.to(kGPU).slice(1, 3, 60, 4).contiguous(), base.slice(1, 3, 60, 4).contiguous(), "step slice");
}

TEST_CASE("cuda: fills, ranges and the counter-based generator match the cpu") {
  for (DType t : {kFloat32, kFloat16, kInt64, kBool}) {
    expect_equal(full({5, 7}, 3.0, TensorOptions(t).device(kGPU)), full({5, 7}, 3.0, t), "full");
  }
  expect_equal(arange(3, 1000, 7, TensorOptions(kInt64).device(kGPU)), arange(3, 1000, 7, kInt64), "arange");
  expect_equal(linspace(-2, 5, 1001, TensorOptions().device(kGPU)), linspace(-2, 5, 1001), "linspace");
  expect_equal(eye(9, TensorOptions().device(kGPU)), eye(9), "eye");
  for (int64_t n : {1, 5, 4099}) {
    manual_seed(42);
    Tensor uc = rand({n});
    manual_seed(42);
    Tensor ug = rand({n}, TensorOptions().device(kGPU));
    expect_equal(ug, uc, "rand is bit-identical");
    manual_seed(3);
    Tensor ic = randint(-5, 17, {n});
    manual_seed(3);
    Tensor ig = randint(-5, 17, {n}, TensorOptions(kInt64).device(kGPU));
    expect_equal(ig, ic, "randint is identical");
    manual_seed(9);
    Tensor nc = randn({n});
    manual_seed(9);
    Tensor ng = randn({n}, TensorOptions().device(kGPU));
    expect_close(ng, nc, {1e-5, 1e-6}, "randn (device logf/cosf differ in the last bits)");
  }
}

TEST_CASE("cuda: unary ops forward and backward, contiguous and strided") {
  manual_seed(2);
  struct U {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    bool positive;
  };
  std::vector<U> ops = {
      {"neg", [](const Tensor& x) { return -x; }, false},
      {"exp", [](const Tensor& x) { return exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, true},
      {"abs", [](const Tensor& x) { return abs(x); }, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, false},
      {"relu", [](const Tensor& x) { return relu(x); }, false},
      {"gelu", [](const Tensor& x) { return gelu(x); }, false},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::Tanh); }, false},
      {"silu", [](const Tensor& x) { return silu(x); }, false},
      {"pow 2.5", [](const Tensor& x) { return pow(x, 2.5); }, true},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }, false},
      {"add scalar", [](const Tensor& x) { return x + 1.25; }, false},
      {"mul scalar", [](const Tensor& x) { return x * -3.0; }, false},
      {"rsub scalar", [](const Tensor& x) { return 2.0 - x; }, false},
  };
  for (DType t : kFloats)
    for (auto& op : ops) {
      Tensor x = randn({67, 45});
      if (op.positive) x = abs(x) + 0.1;
      x = x.to(t);
      std::string name = std::string(op.name) + " " + dtype_name(t);
      parity(name, {x}, [&](const std::vector<Tensor>& in) { return op.f(in[0]); });
      parity(name + " transposed", {x}, [&](const std::vector<Tensor>& in) { return op.f(in[0].t()); });
    }
  Tensor big = randn({1 << 20}).to(kFloat16);  // vectorised path with a grid-stride loop
  parity(
      "gelu large half", {big}, [](const std::vector<Tensor>& in) { return gelu(in[0]); }, false);
}

TEST_CASE("cuda: binary ops with broadcasting, comparisons, where and masked_fill") {
  manual_seed(4);
  for (DType t : kFloats) {
    Tensor a = randn({31, 1, 17}).to(t), b = (randn({1, 9, 17}).abs() + 0.5).to(t);
    std::string s = dtype_name(t);
    parity("add alpha " + s, {a, b}, [](const std::vector<Tensor>& in) { return add(in[0], in[1], 0.5); });
    parity("sub " + s, {a, b}, [](const std::vector<Tensor>& in) { return in[0] - in[1]; });
    parity("mul " + s, {a, b}, [](const std::vector<Tensor>& in) { return in[0] * in[1]; });
    parity("div " + s, {a, b}, [](const std::vector<Tensor>& in) { return in[0] / in[1]; });
    parity("pow " + s, {b, a}, [](const std::vector<Tensor>& in) { return pow(in[0], in[1]); });
    parity("maximum " + s, {a, b}, [](const std::vector<Tensor>& in) { return maximum(in[0], in[1]); });
    parity("minimum " + s, {a, b}, [](const std::vector<Tensor>& in) { return minimum(in[0], in[1]); });
    parity(
        "lt " + s, {a, b}, [](const std::vector<Tensor>& in) { return lt(in[0], in[1]); }, false);
    parity(
        "ge " + s, {a, b}, [](const std::vector<Tensor>& in) { return ge(in[0], in[1]); }, false);
    parity(
        "eq " + s, {a, a}, [](const std::vector<Tensor>& in) { return eq(in[0], in[1].t().t()); }, false);
    parity("where " + s, {a, b}, [](const std::vector<Tensor>& in) { return where(in[0] > 0.0, in[0], in[1]); });
    parity("masked_fill " + s, {a}, [](const std::vector<Tensor>& in) { return masked_fill(in[0], in[0] < 0.0, 7.0); });
  }
  Tensor i = randint(-50, 50, {101, 3}), j = randint(1, 9, {3});
  parity(
      "int64 mul", {i, j}, [](const std::vector<Tensor>& in) { return in[0] * in[1]; }, false);
  parity(
      "int64 ne", {i, j}, [](const std::vector<Tensor>& in) { return ne(in[0], in[1]); }, false);
}

TEST_CASE("cuda: reductions, arg reductions and the softmax family") {
  manual_seed(5);
  for (DType t : kFloats) {
    Tensor x = randn({13, 257, 9}).to(t);
    std::string s = dtype_name(t);
    Tol loose = {tol_for(t).rtol * 8, tol_for(t).atol * 8};  // long sums round differently
    for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {0, 2}, {1, 2}}) {
      std::string d = s + " dims " + std::to_string(dims.size()) + (dims.empty() ? "" : std::to_string(dims[0]));
      parity(
          "sum " + d, {x}, [&](const std::vector<Tensor>& in) { return sum(in[0], dims); }, true, loose);
      parity(
          "mean " + d, {x}, [&](const std::vector<Tensor>& in) { return mean(in[0], dims, true); }, true, loose);
      parity("amax " + d, {x}, [&](const std::vector<Tensor>& in) { return amax(in[0], dims); });
      parity("amin " + d, {x}, [&](const std::vector<Tensor>& in) { return amin(in[0], dims); });
    }
    for (int64_t dim : {0, 1, 2}) {
      parity("max dim " + s, {x}, [&](const std::vector<Tensor>& in) { return std::get<0>(max(in[0], dim)); });
      parity(
          "argmin dim " + s, {x}, [&](const std::vector<Tensor>& in) { return argmin(in[0], dim); }, false);
      parity("softmax " + s, {x}, [&](const std::vector<Tensor>& in) { return softmax(in[0], dim); });
      parity("log_softmax " + s, {x}, [&](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); });
    }
  }
  Tensor scores = randn({2, 3, 77, 77}), r = arange(0, 77, 1, kInt64);
  Tensor causal = gt(r.unsqueeze(0), r.unsqueeze(1));  // rows that start with many -inf
  parity("softmax causal -inf", {scores, causal},
         [](const std::vector<Tensor>& in) { return softmax(masked_fill(in[0], in[1], -INFINITY), -1); });
  parity("softmax causal -inf, columns", {scores, causal},
         [](const std::vector<Tensor>& in) { return softmax(masked_fill(in[0], in[1].t(), -INFINITY), -2); });
  Tensor wide = randn({3, 50257});  // a GPT-2 vocabulary row
  parity("log_softmax wide", {wide}, [](const std::vector<Tensor>& in) { return log_softmax(in[0], -1); });
  parity("sum wide", {wide}, [](const std::vector<Tensor>& in) { return sum(in[0], {1}); }, true, {1e-4, 1e-4});
  Tensor ints = randint(-9, 9, {33, 65});
  parity(
      "int sum", {ints}, [](const std::vector<Tensor>& in) { return sum(in[0], {0}); }, false);
  parity(
      "bool sum", {ints}, [](const std::vector<Tensor>& in) { return sum(in[0] > 0, {1}); }, false);
  Tensor ties = tensor(std::vector<float>{1, 3, 3, 2, NAN, 5, 0, 0}, {2, 4});
  parity(
      "argmax ties and NaN", {ties}, [](const std::vector<Tensor>& in) { return argmax(in[0], 1); }, false);
}

TEST_CASE("cuda: matmul and linear through cuBLAS, every layout and dtype") {
  manual_seed(6);
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    std::string s = dtype_name(t);
    Tol tol = t == kFloat32 ? Tol{1e-4, 1e-4} : t == kFloat64 ? Tol{1e-10, 1e-10} : Tol{2e-2, 2e-2};
    Tensor a = randn_as({5, 37, 29}, t, 0.3), b = randn_as({5, 29, 43}, t, 0.3), w = randn_as({29, 43}, t, 0.3);
    parity(
        "bmm " + s, {a, b}, [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, true, tol);
    parity(
        "bmm transposed " + s, {a, b},
        [](const std::vector<Tensor>& in) { return matmul(in[1].transpose(1, 2), in[0].transpose(1, 2)); }, true, tol);
    parity(
        "broadcast rhs " + s, {a, w}, [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, true, tol);
    parity(
        "vector " + s, {w}, [](const std::vector<Tensor>& in) { return matmul(in[0].select(1, 3), in[0]); }, true, tol);
    parity(
        "strided rows " + s, {a, w},
        [](const std::vector<Tensor>& in) { return matmul(in[0].slice(2, 0, 29, 2), in[1].slice(0, 0, 29, 2)); }, true,
        tol);
    Tensor lw = randn_as({19, 29}, t, 0.3), lb = randn_as({19}, t);
    parity(
        "linear " + s, {a, lw, lb}, [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, true,
        tol);
  }
  Tensor ia = randint(-4, 4, {3, 7, 5}), ib = randint(-4, 4, {3, 5, 6});
  parity(
      "int64 bmm", {ia, ib}, [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, false);
  Tensor e0a = zeros({4, 0}), e0b = zeros({0, 3});
  parity(
      "K = 0", {e0a, e0b}, [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, false);
  cuda::set_allow_tf32(true);
  Tensor big_a = randn({256, 512}), big_b = randn({512, 128});
  parity("tf32", {big_a, big_b}, [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, false,
         {1e-2, 5e-2});
  cuda::set_allow_tf32(false);
}

TEST_CASE("cuda: indexing - index_select, embedding, gather, cat, tril") {
  manual_seed(7);
  for (DType t : kFloats) {
    std::string s = dtype_name(t);
    Tensor x = randn({23, 11, 6}).to(t);
    Tensor idx = tensor(std::vector<int64_t>{3, 0, 22, 3, 3, 17, 9});
    parity("index_select " + s, {x, idx}, [](const std::vector<Tensor>& in) { return index_select(in[0], 0, in[1]); });
    Tensor idx2 = tensor(std::vector<int64_t>{5, 5, 1, 0});
    parity("index_select dim 2 " + s, {x, idx2},
           [](const std::vector<Tensor>& in) { return index_select(in[0], 2, in[1]); });
    Tensor wte = randn({50, 16}).to(t), tokens = randint(0, 50, {4, 33});
    parity("embedding " + s, {wte, tokens}, [](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); });
    Tensor gidx = randint(0, 11, {23, 5, 6});
    parity("gather " + s, {x, gidx}, [](const std::vector<Tensor>& in) { return gather(in[0], 1, in[1]); });
    parity("cat " + s, {x, x}, [](const std::vector<Tensor>& in) { return cat({in[0], in[1].narrow(1, 2, 5)}, 1); });
    parity("tril " + s, {x}, [](const std::vector<Tensor>& in) { return tril(in[0].select(2, 1), 1); });
  }
}

TEST_CASE("cuda: layer_norm forward and fused backward, every variant") {
  manual_seed(8);
  for (const std::string& variant : cuda::kernel_variants("layer_norm")) {
    cuda::set_kernel_variant("layer_norm", variant);
    for (DType t : kFloats)
      for (int64_t n : {1, 33, 768, 1025}) {
        Tensor x = randn({3, 41, n}).to(t) * 2.0 + 1.0, w = randn({n}).to(t), b = randn({n}).to(t);
        std::string s = variant + " " + dtype_name(t) + " n=" + std::to_string(n);
        Tol tol = {tol_for(t).rtol * 4, tol_for(t).atol * 4};
        parity(
            "layer_norm " + s, {x, w, b},
            [n](const std::vector<Tensor>& in) { return layer_norm(in[0], {n}, in[1], in[2]); }, true, tol);
        parity(
            "layer_norm no affine " + s, {x}, [n](const std::vector<Tensor>& in) { return layer_norm(in[0], {n}); },
            true, tol);
      }
  }
  cuda::set_kernel_variant("layer_norm", cuda::kernel_variants("layer_norm").front());
}

TEST_CASE("cuda: dropout draws the same mask as the cpu, bit for bit") {
  for (DType t : kFloats)
    for (int64_t n : {1, 7, 4096 + 3}) {
      Tensor x = randn({n}).to(t);
      manual_seed(11);
      Tensor xc = x.clone().requires_grad_();
      Tensor yc = dropout(xc, 0.37);
      manual_seed(11);
      Tensor xg = x.to(kGPU).requires_grad_();
      Tensor yg = dropout(xg, 0.37);
      expect_equal(yg, yc, std::string("dropout ") + dtype_name(t));
      Tensor up = randn({n}).to(t);
      yc.backward(up);
      yg.backward(up.to(kGPU));
      expect_equal(xg.grad(), xc.grad(), "dropout backward");
    }
}

TEST_CASE("cuda: cross_entropy fused with softmax, ignore_index and label smoothing") {
  manual_seed(12);
  for (DType t : kFloats) {
    Tensor logits = randn({37, 1000}).to(t) * 3.0;
    std::vector<int64_t> tv = randint(0, 1000, {37}).to_vector<int64_t>();
    tv[4] = -100, tv[20] = -100;
    Tensor target = tensor(tv);
    Tol tol = {tol_for(t).rtol * 4, tol_for(t).atol * 4};
    for (double smoothing : {0.0, 0.1})
      for (Reduction r : {Reduction::Mean, Reduction::None, Reduction::Sum})
        parity(
            std::string("cross_entropy ") + dtype_name(t), {logits, target},
            [=](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], -100, smoothing, r); }, true, tol);
  }
  Tensor bad = tensor(std::vector<int64_t>{1, 5, 3});
  CHECK_THROWS_AS(cross_entropy(randn({3, 5}).to(kGPU), bad.to(kGPU)), IndexError);
  CHECK_THROWS_AS(index_select(randn({4, 2}).to(kGPU), 0, tensor(std::vector<int64_t>{0, 4}).to(kGPU)), IndexError);
}

namespace {
// One conv2d configuration: input and weight shapes, stride, padding, dilation, groups.
struct ConvCase {
  const char* name;
  Shape x, w;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
  bool bias;
};
const ConvCase kConvCases[] = {
    {"stride 2x1, dilation 1x2, groups 2", {2, 6, 13, 11}, {8, 3, 3, 2}, {2, 1}, {1, 1}, {1, 2}, 2, true},
    {"3x3 same padding, odd channels", {3, 5, 17, 19}, {7, 5, 3, 3}, {1}, {1}, {1}, 1, true},
    {"depthwise stride 2", {2, 8, 15, 15}, {8, 1, 3, 3}, {2}, {1}, {1}, 8, false},
    {"depthwise multiplier 2", {2, 4, 10, 9}, {8, 1, 3, 3}, {1}, {1}, {1}, 4, true},
    {"1x1", {1, 4, 9, 7}, {6, 4, 1, 1}, {1}, {0}, {1}, 1, false},
    {"5x5 stride 3x2, padding 2x0, dilation 2x1", {2, 3, 20, 16}, {4, 3, 5, 5}, {3, 2}, {2, 0}, {2, 1}, 1, true},
    {"groups 4, 16 -> 32 channels", {4, 16, 12, 12}, {32, 4, 3, 3}, {1}, {1}, {1}, 4, true},
    {"stride 5 past a 4x4 window, padding 3", {2, 2, 7, 7}, {3, 2, 4, 4}, {5}, {3}, {1}, 1, true},
};
}  // namespace

TEST_CASE("cuda: conv2d, every variant (cuDNN, im2col/col2im), forward and backward") {
  manual_seed(13);
  const std::vector<std::string> variants = cuda::kernel_variants("conv2d");
  REQUIRE(!variants.empty());
  CHECK(variants.back() == "im2col");
  for (const std::string& variant : variants) {
    cuda::set_kernel_variant("conv2d", variant);
    for (DType t : kFloats) {
      // cuDNN and the cpu sum in other orders (and cuDNN's Winograd and FFT algorithms transform
      // the data first); 16-bit gradients of the lowering also round its intermediate matmul
      // results, so those get a few units in the last place more.
      const double f32 = variant == "im2col" ? 1e-4 : 3e-4;
      Tol tol = t == kFloat32 ? Tol{f32, f32} : t == kFloat16 ? Tol{2e-2, 2e-2} : Tol{4e-2, 4e-2};
      for (const ConvCase& cc : kConvCases) {
        Tensor x = randn(cc.x).to(t), w = (randn(cc.w) * 0.2).to(t), b = randn({cc.w[0]}).to(t);
        const std::string name = "conv2d " + variant + " " + dtype_name(t) + " " + cc.name;
        parity(
            name, {x, w, b},
            [&cc](const std::vector<Tensor>& in) {
              return conv2d(in[0], in[1], cc.bias ? in[2] : Tensor(), cc.stride, cc.padding, cc.dilation, cc.groups);
            },
            true, tol);
      }
      // A non-contiguous input (the op makes it contiguous for either path).
      Tensor x = randn({2, 6, 11, 13}).to(t), w = (randn({4, 6, 3, 3}) * 0.2).to(t);
      parity(
          "conv2d " + variant + " " + dtype_name(t) + " transposed input", {x, w},
          [](const std::vector<Tensor>& in) { return conv2d(in[0].transpose(2, 3), in[1], Tensor(), {1}, {1}); }, true,
          tol);
    }
    // float64 is not a cuDNN dtype: it declines, and the lowering runs.
    Tensor x = randn({2, 3, 9, 8}).to(kFloat64), w = randn({4, 3, 3, 3}).to(kFloat64);
    parity("conv2d " + variant + " float64", {x, w},
           [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), {2}, {1}); }, true,
           {1e-10, 1e-10});
    // float32 on TF32 tensor cores when allowed (10-bit mantissa inputs, float32 accumulation).
    cuda::set_allow_tf32(true);
    Tensor xt = randn({4, 32, 17, 17}), wt = randn({64, 32, 3, 3}) * 0.1;
    parity("conv2d " + variant + " tf32", {xt, wt},
           [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), {1}, {1}); }, true, {1e-2, 5e-2});
    cuda::set_allow_tf32(false);
  }
  cuda::set_kernel_variant("conv2d", variants.front());
}

TEST_CASE("cuda: conv2d on a side stream: 16-bit tensor-core shapes and a batch slice at an odd offset") {
  manual_seed(15);
  cuda::Stream side = cuda::Stream::create(0);
  cuda::StreamGuard on_side(side);  // cuDNN's handle, its workspace and the op all on this stream
  for (const std::string& variant : cuda::kernel_variants("conv2d")) {
    cuda::set_kernel_variant("conv2d", variant);
    for (DType t : {kFloat16, kBFloat16}) {
      Tol tol = t == kFloat16 ? Tol{2e-2, 2e-2} : Tol{4e-2, 4e-2};
      Tensor x = randn({4, 32, 17, 17}).to(t), w = (randn({64, 32, 3, 3}) * 0.1).to(t);
      parity(
          "conv2d " + variant + " " + dtype_name(t) + " 32 -> 64 channels", {x, w},
          [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), {1}, {1}); }, true, tol);
      // Images 1..4 of 5 with 3 channels: contiguous, but 1734 bytes into the storage (2-byte aligned).
      Tensor xs = randn({5, 3, 17, 17}).to(t), ws = (randn({8, 3, 3, 3}) * 0.2).to(t);
      parity(
          "conv2d " + variant + " " + dtype_name(t) + " batch slice", {xs, ws},
          [](const std::vector<Tensor>& in) { return conv2d(in[0].slice(0, 1, 5), in[1], Tensor(), {1}, {1}); }, true,
          tol);
    }
  }
  cuda::set_kernel_variant("conv2d", cuda::kernel_variants("conv2d").front());
  side.synchronize();
}

TEST_CASE("cuda: conv2d's scratch is booked as Workspace and returned, cuDNN's and im2col's") {
  manual_seed(14);
  const int64_t N = 8, C = 16, H = 32, W = 32, O = 16;
  Tensor xs = randn({N, C, H, W}), ws = randn({O, C, 3, 3}) * 0.1;
  // The lowering's columns for the whole batch: N x (C * 3 * 3) x (H * W) float32, rounded to 512 B.
  const int64_t columns = (N * C * 9 * H * W * 4 + 511) / 512 * 512;
  for (const std::string& variant : cuda::kernel_variants("conv2d")) {
    cuda::set_kernel_variant("conv2d", variant);
    const MemoryStats base = memory_stats(kGPU);
    Tensor x = xs.to(kGPU).requires_grad_(), w = ws.to(kGPU).requires_grad_();
    reset_peak(kGPU);
    Tensor y = conv2d(x, w, Tensor(), {1}, {1});
    MemoryStats s = memory_stats(kGPU);
    const int64_t fwd_peak = s.peak(Category::Workspace) - base.category(Category::Workspace);
    CHECK_MESSAGE(s.category(Category::Workspace) == base.category(Category::Workspace), variant, ": forward");
    // The lowering's scratch is exactly the columns; cuDNN's workspace (0 for some algorithms) is
    // whatever its algorithm asks for, never exactly that: equality would mean cuDNN declined.
    if (variant == "im2col")
      CHECK_MESSAGE(fwd_peak == columns, variant, ": forward Workspace peak ", fwd_peak);
    else
      CHECK_MESSAGE(fwd_peak != columns, variant, ": forward Workspace peak ", fwd_peak, " = the im2col columns");
    Tensor up = randn_as(y.shape(), kFloat32).to(kGPU);
    reset_peak(kGPU);
    const MemoryStats before = memory_stats(kGPU);
    y.backward(up);
    s = memory_stats(kGPU);
    const int64_t bwd_peak = s.peak(Category::Workspace) - before.category(Category::Workspace);
    const int64_t tmp_peak = s.peak(Category::Temporary) - before.category(Category::Temporary);
    CHECK_MESSAGE(s.category(Category::Workspace) == before.category(Category::Workspace), variant, ": backward");
    // The lowering's weight gradient takes the columns again as Workspace, and its input gradient
    // the column gradients [N, G, K, L] as Temporary; cuDNN takes neither.
    if (variant == "im2col") {
      CHECK_MESSAGE(bwd_peak == columns, variant, ": backward Workspace peak ", bwd_peak);
      CHECK_MESSAGE(tmp_peak >= columns, variant, ": backward Temporary peak ", tmp_peak);
    } else {
      CHECK_MESSAGE(bwd_peak != columns, variant, ": backward Workspace peak ", bwd_peak, " = the im2col columns");
      CHECK_MESSAGE(tmp_peak < columns, variant, ": backward Temporary peak ", tmp_peak, " holds column gradients");
    }
    MESSAGE("conv2d ", variant, ": Workspace peak forward ", format_bytes(fwd_peak), ", backward ",
            format_bytes(bwd_peak), " (im2col columns ", format_bytes(columns), ")");
    CHECK(x.grad().defined());
    CHECK(w.grad().defined());
    x = Tensor(), w = Tensor(), y = Tensor(), up = Tensor();
    CHECK_MESSAGE(memory_stats(kGPU).allocated == base.allocated, variant, ": everything returned");
  }
  cuda::set_kernel_variant("conv2d", cuda::kernel_variants("conv2d").front());
}

TEST_CASE("cuda: pooling, forward and backward") {
  manual_seed(15);
  for (DType t : {kFloat32, kFloat16}) {
    Tensor x = randn({2, 6, 13, 11}).to(t);
    parity("max_pool2d", {x}, [](const std::vector<Tensor>& in) { return max_pool2d(in[0], {3, 2}, {2, 1}, {1, 1}); });
    parity("avg_pool2d", {x}, [](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 0}); });
  }
}
