// CUDA against the CPU beyond the op case list (whose "cuda: <op> matches the cpu" tests are in
// test_ops.cpp): copies and casts between every pair of dtypes, fills and the counter-based
// generator, indices out of range, and conv2d on a side stream and its Workspace in the ledger.
#include "gpu_util.h"

using namespace gpu_test;

TEST_CASE("cuda: cross_entropy and index_select raise IndexError for indices out of range") {
  Tensor bad = tensor(std::vector<int64_t>{1, 5, 3});
  CHECK_THROWS_AS(cross_entropy(randn({3, 5}).to(kGPU), bad.to(kGPU)), IndexError);
  CHECK_THROWS_AS(index_select(randn({4, 2}).to(kGPU), 0, tensor(std::vector<int64_t>{0, 4}).to(kGPU)), IndexError);
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
