// The 8-bit dtypes uint8 and int8 (the 8-bit optimizers keep their codes in uint8): sizes, names and
// codes, promotion, storage on cpu and meta, casts (wrapping as PyTorch's), comparisons, indexing,
// safetensors U8/I8, and no autograd.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <memgrad/memgrad.h>

#include "expect_error.h"

using namespace mg;

TEST_CASE("dtype8: sizes, names, codes and promotion") {
  CHECK(dtype_size(kUInt8) == 1);
  CHECK(dtype_size(kInt8) == 1);
  CHECK(std::string(dtype_name(kUInt8)) == "uint8");
  CHECK(std::string(dtype_name(kInt8)) == "int8");
  CHECK_FALSE(is_floating(kUInt8));
  CHECK_FALSE(is_floating(kInt8));
  for (DType t : {kBool, kUInt8, kInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    CHECK(dtype_from_code(int(t)) == t);
  expect_error<DTypeError>([] { dtype_from_code(9); }, {"expected a dtype code in [0, 8]", "uint8 1", "got 9"});
  expect_error<DTypeError>([] { dtype_from_code(-1); }, {"got -1"});
  // PyTorch's table, but for uint8 + int8: int16 there, int32 here (memgrad has no int16)
  CHECK(promote_types(kUInt8, kInt8) == kInt32);
  CHECK(promote_types(kBool, kUInt8) == kUInt8);
  CHECK(promote_types(kUInt8, kInt32) == kInt32);
  CHECK(promote_types(kInt8, kInt64) == kInt64);
  CHECK(promote_types(kInt8, kFloat16) == kFloat16);
  CHECK(promote_types(kUInt8, kBFloat16) == kBFloat16);
  Tensor a = ones({3}, kUInt8), b = ones({3}, kInt8);
  CHECK((a + b).dtype() == kInt32);
  CHECK((a + 1).dtype() == kUInt8);      // a Python int keeps the tensor's integer dtype
  CHECK((a * 2.5).dtype() == kFloat32);  // a float makes it the default float
  CHECK((a / a).dtype() == kFloat32);    // true division
}

TEST_CASE("dtype8: storage, values and casts wrap as PyTorch's") {
  for (Device d : {kCPU, kMeta}) {
    const int64_t before = memory_stats(d).allocated;
    Tensor t = empty({1000}, TensorOptions(kUInt8).device(d));
    CHECK(t.nbytes() == 1000);
    CHECK(memory_stats(d).allocated - before == 1024);  // one 512-byte granule more
  }
  Tensor u = tensor(std::vector<uint8_t>{0, 1, 200, 255});
  CHECK(u.dtype() == kUInt8);
  CHECK(u.to_vector<int>() == std::vector<int>{0, 1, 200, 255});
  Tensor i8 = tensor(std::vector<int8_t>{-128, -1, 0, 127});
  CHECK(i8.dtype() == kInt8);
  CHECK(i8.to_vector<int>() == std::vector<int>{-128, -1, 0, 127});
  // int64 -> uint8 / int8 keep the low byte (torch.tensor([300, -1]).to(torch.uint8) == [44, 255])
  Tensor wide = tensor(std::vector<int64_t>{300, -1, 200});
  CHECK(wide.to(kUInt8).to_vector<int>() == std::vector<int>{44, 255, 200});
  CHECK(wide.to(kInt8).to_vector<int>() == std::vector<int>{44, -1, -56});
  CHECK(u.to(kFloat32).to_vector<float>() == std::vector<float>{0, 1, 200, 255});
  CHECK(i8.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{-128, -1, 0, 127});
  CHECK(tensor({0.5f, 3.7f, 254.9f}).to(kUInt8).to_vector<int>() == std::vector<int>{0, 3, 254});  // truncation
  CHECK((u + u).to_vector<int>() == std::vector<int>{0, 2, 144, 254});  // uint8 arithmetic wraps
  CHECK(clamp(u, 10, 250).to_vector<int>() == std::vector<int>{10, 10, 200, 250});
  CHECK(clamp(i8, -1000, 1000).to_vector<int>() == std::vector<int>{-128, -1, 0, 127});  // bounds kept in range
  Tensor c = u.clone();
  c.copy_(tensor(std::vector<uint8_t>{9, 8, 7, 6}));
  CHECK(c.to_vector<int>() == std::vector<int>{9, 8, 7, 6});
  CHECK(u.to_vector<int>() == std::vector<int>{0, 1, 200, 255});
  CHECK(sum(u).item<int64_t>() == 456);  // as PyTorch: integer sums in int64
  CHECK(sum(u).dtype() == kInt64);
  CHECK(max(i8).item<int>() == 127);
}

TEST_CASE("dtype8: comparisons and indexing") {
  Tensor u = tensor(std::vector<uint8_t>{5, 200, 17, 0, 255, 42});
  CHECK((u > 100).dtype() == kBool);
  CHECK((u > 100).to_vector<int>() == std::vector<int>{0, 1, 0, 0, 1, 0});
  CHECK((u == tensor(std::vector<uint8_t>{5, 0, 17, 0, 0, 0})).to_vector<int>() == std::vector<int>{1, 0, 1, 1, 0, 0});
  Tensor i8 = tensor(std::vector<int8_t>{-3, 4, -5, 6});
  CHECK((i8 < 0).to_vector<int>() == std::vector<int>{1, 0, 1, 0});
  CHECK((i8 >= tensor(std::vector<int8_t>{-3, 5, -6, 6})).to_vector<int>() == std::vector<int>{1, 0, 1, 1});

  Tensor m = u.view({2, 3});
  CHECK(m.select(0, 1).to_vector<int>() == std::vector<int>{0, 255, 42});
  CHECK(m.narrow(1, 1, 2).contiguous().to_vector<int>() == std::vector<int>{200, 17, 255, 42});
  CHECK(m.t().contiguous().to_vector<int>() == std::vector<int>{5, 0, 200, 255, 17, 42});
  Tensor idx = tensor(std::vector<int64_t>{2, 0});
  CHECK(index_select(m, 1, idx).to_vector<int>() == std::vector<int>{17, 5, 42, 0});
  CHECK(gather(m, 1, tensor({{1L, 1L}, {0L, 2L}})).to_vector<int>() == std::vector<int>{200, 200, 0, 42});
  Tensor dst = zeros({2, 3}, kUInt8);
  dst.scatter_(1, tensor({{2L}, {0L}}), tensor(std::vector<uint8_t>{7, 9}, {2, 1}));
  CHECK(dst.to_vector<int>() == std::vector<int>{0, 0, 7, 9, 0, 0});
  CHECK(masked_fill(u, u > 100, 1).to_vector<int>() == std::vector<int>{5, 1, 17, 0, 1, 42});
  CHECK(where(u > 100, u, zeros({6}, kUInt8)).to_vector<int>() == std::vector<int>{0, 200, 0, 0, 255, 0});
  CHECK(cat({u.narrow(0, 0, 2), u.narrow(0, 4, 2)}, 0).to_vector<int>() == std::vector<int>{5, 200, 255, 42});
}

TEST_CASE("dtype8: no autograd, as PyTorch") {
  expect_error<DTypeError>([] { ones({3}, kUInt8).requires_grad_(); }, {"uint8"});
  expect_error<DTypeError>([] { ones({3}, kInt8).requires_grad_(); }, {"int8"});
  Tensor x = ones({3}).requires_grad_();
  Tensor q = x.to(kUInt8);  // a cast to an integer type ends the graph
  CHECK_FALSE(q.requires_grad());
}

TEST_CASE("dtype8: safetensors U8 and I8 round trip; an unknown dtype is refused") {
  const std::string path = "/tmp/mg_dtype8_" + std::to_string(::getpid()) + ".safetensors";
  nn::StateDict d{{"u", tensor(std::vector<uint8_t>{1, 2, 255}, {3})},
                  {"i", tensor(std::vector<int8_t>{-1, 0, 1}, {3})}};
  nn::save_safetensors(d, path);
  nn::StateDict back = nn::load_safetensors(path);
  CHECK(back.at("u").dtype() == kUInt8);
  CHECK(back.at("i").dtype() == kInt8);
  CHECK(equal(back.at("u"), d.at("u")));
  CHECK(equal(back.at("i"), d.at("i")));
  {  // a header naming a dtype memgrad lacks
    const std::string header = R"({"x":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})";
    std::ofstream f(path, std::ios::binary);
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header << "ab";
  }
  expect_error<IOError>([&] { nn::load_safetensors(path); }, {"unsupported dtype \"U16\"", "I8, U8"});
  std::remove(path.c_str());
}
