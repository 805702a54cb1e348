// Sizes that overflow: every shape that becomes an element count, a stride, a byte size, a view's
// bounds or a conv/pool output size is checked. An overflow is a ShapeError naming the shape; a
// byte count no device can address is an OutOfMemoryError with a readable size. Nothing leaks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include <memgrad/memgrad.h>

#include "expect_error.h"

using namespace mg;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
}

TEST_CASE("overflow: element counts that wrap are ShapeErrors naming the shape") {
  // Each of these used to wrap to a small or zero byte count and hand out a too-small block.
  expect_error<ShapeError>(
      [] {
        randn({int64_t(1) << 40, int64_t(1) << 40});
      },
      {"[1099511627776, 1099511627776]", "more than 2^63 - 1 elements"});
  expect_error<ShapeError>([] { ones({int64_t(1) << 31, int64_t(1) << 31, 4}); }, {"[2147483648, 2147483648, 4]"});
  expect_error<ShapeError>([] { zeros({(int64_t(1) << 61) + 1, 8}); }, {"[2305843009213693953, 8]"});
  expect_error<ShapeError>([] { empty({kMax, 2}, kMeta); }, {"[9223372036854775807, 2]"});
  // The count fits, the bytes do not fit in 64 bits.
  expect_error<ShapeError>([] { randn({int64_t(1) << 62}); }, {"[4611686018427387904]", "float32", "2^64 bytes"});
  expect_error<ShapeError>([] { arange(0, int64_t(1) << 62); }, {"[4611686018427387904]", "int64"});
  expect_error<ShapeError>([] { arange(0.0, INFINITY); }, {"arange", "inf"});
  expect_error<ShapeError>([] { arange(0.0, 1e300, 1e-300); }, {"arange", "more than 2^63 - 1"});
  float dummy = 0;
  expect_error<ShapeError>([&] { from_blob(&dummy, {int64_t(1) << 62, 4}); }, {"[4611686018427387904, 4]"});
  // A zero-size tensor has no elements however large its other sizes; its strides must still fit.
  CHECK(numel_of({0, kMax, kMax}) == 0);
  CHECK(empty({0, int64_t(1) << 62}).numel() == 0);
  expect_error<ShapeError>(
      [] {
        empty({int64_t(1) << 40, int64_t(1) << 40, int64_t(1) << 40, 0});
      },
      {"[1099511627776, 1099511627776, 1099511627776, 0]", "stride"});
}

TEST_CASE("overflow: a request beyond any address space is an OutOfMemoryError with a readable size") {
  const MemoryStats before = memory_stats(kCPU);
  std::string what;
  try {
    randn({int64_t(1) << 61});  // 2^63 bytes: int64 printed it as "--9223372036854775808 B"
  } catch (const OutOfMemoryError& e) {
    what = e.what();
  }
  INFO(what);
  CHECK(what.find("tried to allocate 8.00 EiB") != std::string::npos);
  CHECK(what.find("--") == std::string::npos);
  CHECK(what.find("no device can address more than 128.00 PiB") != std::string::npos);
  CHECK(memory_stats(kCPU).num_ooms == before.num_ooms + 1);
  CHECK(memory_stats(kCPU).allocated == before.allocated);
  CHECK(memory_stats(kCPU).reserved == before.reserved);
  // The meta device refuses the same, without pretending to hold exabytes.
  expect_error<OutOfMemoryError>([] { empty({int64_t(1) << 58}, kMeta); }, {"on meta", "1.00 EiB"});
  CHECK(format_bytes(std::numeric_limits<int64_t>::min()) == "-8.00 EiB");
  CHECK(format_bytes(int64_t(3) << 50) == "3.00 PiB");
  CHECK(format_byte_count(std::numeric_limits<uint64_t>::max()) == "16.00 EiB");
}

TEST_CASE("overflow: views, narrow, slice and cat check their arithmetic") {
  Tensor s = scalar_tensor(1.0);
  CHECK(s.expand({int64_t(1) << 31, int64_t(1) << 31}).numel() == int64_t(1) << 62);
  expect_error<ShapeError>([&] { s.expand({int64_t(1) << 40, int64_t(1) << 40}); }, {"[1099511627776, 1099511627776]"});
  Tensor x = arange(10.0);
  expect_error<ShapeError>([&] { x.view({-1, int64_t(1) << 62, 4}); }, {"[-1, 4611686018427387904, 4]"});
  // start + length used to wrap negative and pass the bounds check.
  expect_error<IndexError>([&] { x.narrow(0, 1, kMax); }, {"narrow", "length 9223372036854775807"});
  expect_error<IndexError>([&] { x.narrow(0, 11, 0); }, {"narrow", "start 11"});
  CHECK(x.narrow(0, 10, 0).numel() == 0);
  // A step near int64's limit picks the first element only, as x[0:10:huge] does in PyTorch.
  Tensor picked = x.slice(0, 0, 10, kMax);
  CHECK(picked.shape() == Shape{1});
  CHECK(picked.item<float>() == 0);
  CHECK(x.slice(0, 3, kMax, kMax - 1).to_vector<float>() == std::vector<float>{3});
  CHECK(x.slice(0, 2, 10, 3).to_vector<float>() == std::vector<float>{2, 5, 8});
  // Four sizes of 2^62 add up to exactly 2^64, which wrapped to an empty result.
  Tensor big = s.expand({int64_t(1) << 62});
  expect_error<ShapeError>([&] { cat({big, big, big, big}); }, {"cat", "more than 2^63 - 1", "[4611686018427387904]"});
}

TEST_CASE("overflow: conv and pool output sizes") {
  Tensor x = ones({1, 1, 4, 4}), w = ones({1, 1, 5, 5});
  // A window wider than the input: (4 - 5) / 2 + 1 truncated to an output of 1 before.
  expect_error<ShapeError>([&] { conv2d(x, w, Tensor(), {2}); }, {"conv2d", "too small", "5x5"});
  expect_error<ShapeError>(
      [&] {
        conv2d(x, ones({1, 1, 3, 3}), Tensor(), {1}, {kMax / 2 + 1});
      },
      {"conv2d", "overflows int64"});
  expect_error<ShapeError>(
      [&] {
        conv2d(x, ones({1, 1, 3, 3}), Tensor(), {1}, {0}, {kMax / 2 + 1});
      },
      {"conv2d", "overflows int64"});
  // padding * 2 wrapped negative and passed the "at most half the kernel" check.
  expect_error<ValueError>([&] { max_pool2d(x, {2}, {1}, {kMax / 2 + 1}); }, {"max_pool2d", "at most half"});
  expect_error<ShapeError>([&] { avg_pool2d(x, {kMax}, {1}, {0}); }, {"avg_pool2d", "too small"});
  CHECK(conv2d(x, ones({1, 1, 3, 3}), Tensor(), {2}).shape() == Shape{1, 1, 1, 1});
  CHECK(max_pool2d(x, {2}).shape() == Shape{1, 1, 2, 2});
}

TEST_CASE("overflow: MG_MEMORY_LIMIT values beyond int64 are rejected, not cast") {
  expect_error<ValueError>([] { memory::limit_from_env("1e30G", DeviceType::CPU); }, {"MG_MEMORY_LIMIT", "1e30G"});
  expect_error<ValueError>([] { memory::limit_from_env("inf", DeviceType::CPU); }, {"MG_MEMORY_LIMIT"});
  expect_error<ValueError>([] { memory::limit_from_env("cpu=9000000000G", DeviceType::CPU); }, {"9000000000G"});
  CHECK(memory::limit_from_env("7G", DeviceType::CPU) == int64_t(7) << 30);
}
