// uint8 and int8 on CUDA against the CPU: copies and casts (wrapping as PyTorch's), comparisons,
// indexing, and additions that wrap (scatter_add's 8-bit atomics).
#include "gpu_util.h"

using namespace gpu_test;

TEST_CASE("cuda: uint8 and int8 copies, casts, comparisons, indexing and scatter_add as on the cpu") {
  manual_seed(2);
  const Tensor u = randint(0, 256, {37, 5}, kInt64).to(kUInt8), i8 = randint(-128, 128, {37, 5}, kInt64).to(kInt8);
  const Tensor idx = randint(0, 37, {50}, kInt64);
  for (const Tensor& x : {u, i8}) {
    CAPTURE(x.dtype());
    const Tensor g = x.to(kGPU);
    expect_equal(g.to(kFloat32).to(kCPU), x.to(kFloat32), "cast to float32");
    expect_equal(g.to(kInt64).to(kCPU), x.to(kInt64), "cast to int64");
    expect_equal((g > 3).to(kCPU), x > 3, "compare");
    expect_equal(g.t().contiguous().to(kCPU), x.t().contiguous(), "transpose");
    expect_equal(index_select(g, 0, idx.to(kGPU)).to(kCPU), index_select(x, 0, idx), "index_select");
    expect_equal(
        index_add(zeros({37, 5}, x.dtype()).to(kGPU), 0, idx.to(kGPU), index_select(g, 0, idx.to(kGPU))).to(kCPU),
        index_add(zeros({37, 5}, x.dtype()), 0, idx, index_select(x, 0, idx)), "index_add wraps");
    expect_equal((g + g).to(kCPU), x + x, "add wraps");
  }
  expect_equal(tensor(std::vector<int64_t>{300, -1}).to(kGPU).to(kUInt8).to(kCPU),
               tensor(std::vector<uint8_t>{44, 255}), "int64 to uint8 keeps the low byte");
}
