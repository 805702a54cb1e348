// Every bad input raises the right mg::Error subclass with a message naming the op, what was
// expected and what was given; afterwards the library still works and the ledger is back where
// it was before the failing call (nothing leaked).
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <typeinfo>
#include <vector>

#include <memgrad/memgrad.h>

#include "expect_error.h"

namespace {

mg::Tensor I(const std::vector<int64_t>& v) { return mg::tensor(v); }

// Removes a memory limit however the test ends.
struct LimitGuard {
  ~LimitGuard() { mg::set_memory_limit(mg::kCPU, 0); }
};

}  // namespace

TEST_CASE("errors: shape mismatches") {
  auto a = mg::ones({2, 3}), b = mg::ones({4});
  expect_error<mg::ShapeError>([&] { mg::add(a, b); }, {"add:", "[2, 3]", "[4]", "cannot be broadcast"});
  expect_error<mg::ShapeError>([&] { a* mg::ones({3, 3}); }, {"mul:", "[2, 3]", "[3, 3]"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::matmul(a, mg::ones({4, 5}));
      },
      {"matmul:", "expected the inner dims to match", "[2, 3] @ [4, 5]", "3 vs 4"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::matmul(mg::ones({2, 2, 3}), mg::ones({3, 3, 2}));
      },
      {"matmul:", "[2]", "[3]"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::cat({a, mg::ones({2, 4})}, 0);
      },
      {"cat:", "expected size 3 in dim 1", "got [2, 4]", "position 1"});
  expect_error<mg::ShapeError>([&] { mg::cat({a, mg::ones({6})}); }, {"cat:", "expected tensors with 2 dims", "[6]"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::linear(a, mg::ones({5, 4}));
      },
      {"linear:", "expected input [..., 4]", "weight [5, 4]", "got [2, 3]"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::linear(a, mg::ones({5, 3}), mg::ones({4}));
      },
      {"linear:", "expected a bias of shape [5]", "got [4]"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::conv2d(mg::ones({1, 3, 5, 5}), mg::ones({2, 2, 3, 3}));
      },
      {"conv2d:", "expected weight with 3 input channels", "[1, 3, 5, 5]", "[2, 2, 3, 3]"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::conv2d(mg::ones({3, 5, 5}), mg::ones({2, 3, 3, 3}));
      },
      {"conv2d:", "expected input [N, C, H, W]", "got [3, 5, 5]"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::conv2d(mg::ones({1, 3, 2, 2}), mg::ones({2, 3, 3, 3}));
      },
      {"conv2d:", "too small", "3x3"});
  expect_error<mg::ShapeError>([&] { mg::layer_norm(a, {5}); },
                               {"layer_norm:", "expected an input ending in [5]", "got [2, 3]"});
  expect_error<mg::ShapeError>([&] { mg::layer_norm(a, {3}, mg::ones({2})); },
                               {"layer_norm:", "expected weight and bias of shape [3]", "got [2]"});
  expect_error<mg::ShapeError>([&] { mg::rms_norm(a, {2}); },
                               {"rms_norm:", "expected an input ending in [2]", "got [2, 3]"});
  expect_error<mg::ShapeError>([&] { mg::rms_norm(a, {3}, mg::ones({2})); },
                               {"rms_norm:", "expected weight of shape [3]", "got [2]"});
  expect_error<mg::DTypeError>([&] { mg::rms_norm(a, {3}, mg::ones({3}, mg::kFloat64)); },
                               {"rms_norm:", "expected weight of dtype float32", "got float64"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::cross_entropy(mg::ones({3, 5}), I({0, 1, 2, 3}));
      },
      {"cross_entropy:", "expected a target of shape [3]", "logits [3, 5]", "got [4]"});
  expect_error<mg::ShapeError>([&] { a.view({4, 2}); }, {"view:", "[4, 2]", "invalid for 6 elements"});
  expect_error<mg::ShapeError>([&] { a.t().view({6}); }, {"view:", "not compatible", "reshape"});
  expect_error<mg::ShapeError>([&] { a.reshape({-1, -1}); }, {"reshape:", "only one dim can be -1"});
  expect_error<mg::ShapeError>([&] { a.expand({4, 3}); }, {"expand:", "[2, 3]", "[4, 3]"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::tensor(std::vector<float>{1, 2, 3}, {2, 2});
      },
      {"tensor:", "[2, 2]", "4 elements", "got 3 values"});
  expect_error<mg::ShapeError>([&] { mg::ones({2}).item<float>(); }, {"item:", "one element", "[2]"});
  expect_error<mg::ShapeError>([&] { mg::ones({2}).add_(mg::ones({2, 2})); }, {"add_:", "[2]", "[2, 2]"});
  expect_error<mg::ShapeError>([&] { mg::zeros({2, -1}); }, {"empty:", "non-negative", "[2, -1]"});
}

TEST_CASE("errors: dtype mismatches") {
  auto a = mg::ones({2, 3});
  expect_error<mg::DTypeError>([&] { mg::where(a, a, a); }, {"where:", "condition of dtype bool", "got float32"});
  expect_error<mg::DTypeError>([&] { mg::index_select(a, 0, mg::tensor(std::vector<int32_t>{0})); },
                               {"index_select:", "index of dtype int64", "got int32"});
  expect_error<mg::DTypeError>(
      [&] {
        mg::gather(a, 0, mg::zeros({1, 3}));
      },
      {"gather:", "index of dtype int64", "got float32"});
  expect_error<mg::DTypeError>([&] { mg::embedding(a, mg::tensor(std::vector<int32_t>{0})); },
                               {"embedding:", "int64", "got int32"});
  expect_error<mg::DTypeError>([&] { mg::cross_entropy(a, mg::zeros({2})); },
                               {"cross_entropy:", "targets of dtype int64", "got float32"});
  expect_error<mg::DTypeError>(
      [&] {
        mg::linear(a, mg::ones({4, 3}, mg::kFloat64));
      },
      {"linear:", "one dtype", "float32 and float64"});
  expect_error<mg::DTypeError>(
      [&] {
        mg::conv2d(mg::ones({1, 1, 3, 3}), mg::ones({1, 1, 1, 1}, mg::kFloat16));
      },
      {"conv2d:", "one dtype", "float32 and float16"});
  expect_error<mg::DTypeError>([&] { mg::ones({2}, mg::kInt64).requires_grad_(); },
                               {"requires_grad_:", "floating", "int64"});
  expect_error<mg::DTypeError>([&] { mg::ones({2}, mg::TensorOptions(mg::kInt32).requires_grad()); },
                               {"requires_grad_:", "int32"});
  expect_error<mg::DTypeError>([&] { mg::ones({2}, mg::kInt64).mean(); }, {"mean:", "floating", "int64"});
  expect_error<mg::DTypeError>([&] { mg::softmax(mg::ones({2}, mg::kInt32), 0); }, {"softmax:", "floating", "int32"});
  expect_error<mg::DTypeError>([&] { mg::rand({2}, mg::kInt32); }, {"rand:", "floating dtype", "int32"});
  expect_error<mg::DTypeError>([&] { mg::ones({2}, mg::kInt32).data_ptr<float>(); }, {"data_ptr:", "int32", "float32"});
  expect_error<mg::DTypeError>(
      [&] {
        auto i = mg::ones({2}, mg::kInt32);
        i.div_(2);
      },
      {"div_:", "int32"});
  expect_error<mg::DTypeError>(
      [&] {
        auto i = mg::ones({2}, mg::kInt64);
        i.add_(mg::ones({2}));
      },
      {"add_:", "float32", "int64"});
  expect_error<mg::DTypeError>([&] { mg::masked_fill(a, mg::ones({2, 3}), 0); }, {"masked_fill:", "bool", "float32"});
}

TEST_CASE("errors: device mismatches") {
  auto c = mg::ones({2}), m = mg::ones({2}, mg::kMeta);
  expect_error<mg::DeviceError>([&] { c + m; }, {"add:", "same device", "cpu and meta"});
  expect_error<mg::DeviceError>(
      [&] {
        mg::matmul(mg::ones({2, 2}), mg::ones({2, 2}, mg::kMeta));
      },
      {"matmul:", "same device", "cpu and meta"});
  expect_error<mg::DeviceError>([&] { mg::cat({c, m}); }, {"cat:", "cpu and meta"});
  expect_error<mg::DeviceError>([&] { mg::where(mg::ones({2}, mg::kBool), c, m); }, {"where:", "cpu and meta"});
  expect_error<mg::DeviceError>(
      [&] {
        mg::linear(mg::ones({1, 2}), mg::ones({3, 2}, mg::kMeta));
      },
      {"linear:", "cpu and meta"});
  expect_error<mg::DeviceError>(
      [&] { mg::index_select(c, 0, mg::zeros({1}, mg::TensorOptions(mg::kInt64).device(mg::kMeta))); },
      {"index_select:", "cpu and meta"});
  expect_error<mg::DeviceError>([&] { c.add_(m); }, {"add_:", "cpu and meta"});
  expect_error<mg::DeviceError>(
      [&] {
        auto x = mg::ones({2}).requires_grad_();
        (x * 2.0).backward(mg::ones({2}, mg::kMeta));
      },
      {"backward:", "gradient on cpu", "meta"});
}

TEST_CASE("errors: dims and indices out of range") {
  auto a = mg::arange(12, mg::kFloat32).view({3, 4});
  expect_error<mg::IndexError>([&] { a.select(0, 3); }, {"select:", "index in [-3, 2]", "got 3"});
  expect_error<mg::IndexError>([&] { a.select(2, 0); }, {"select:", "dim in [-2, 1]", "got 2"});
  expect_error<mg::IndexError>([&] { a.narrow(1, 3, 2); }, {"narrow:", "start + length <= 4", "start 3", "length 2"});
  expect_error<mg::IndexError>([&] { a.transpose(0, -3); }, {"transpose:", "got -3"});
  expect_error<mg::IndexError>([&] { a.sum({5}); }, {"sum:", "dim in [-2, 1]", "got 5"});
  expect_error<mg::IndexError>([&] { a.permute({0, 0}); }, {"permute:", "appears twice"});
  expect_error<mg::IndexError>([&] { a.size(2); }, {"size:", "got 2"});
  expect_error<mg::IndexError>(
      [&] {
        mg::index_select(a, 0, I({0, 5}));
      },
      {"index_select:", "indices in [0, 3)", "got 5", "position 1"});
  expect_error<mg::IndexError>([&] { mg::index_select(a, 1, I({-1})); }, {"index_select:", "[0, 4)", "got -1"});
  expect_error<mg::IndexError>(
      [&] {
        mg::gather(a, 1, mg::tensor(std::vector<int64_t>{0, 4}, {1, 2}));
      },
      {"gather:", "indices in [0, 4)", "got 4"});
  expect_error<mg::IndexError>([&] { mg::embedding(a, I({1, 2, 7})); }, {"embedding:", "[0, 3)", "got 7"});
  expect_error<mg::IndexError>(
      [&] {
        mg::cross_entropy(mg::zeros({2, 5}), I({1, 7}));
      },
      {"cross_entropy:", "target values in [0, 5)", "got 7", "position 1"});
  expect_error<mg::IndexError>([&] { mg::cross_entropy(mg::zeros({2, 5}), I({-1, 0})); }, {"cross_entropy:", "got -1"});
  expect_error<mg::IndexError>([&] { mg::cat({a, a}, 2); }, {"cat:", "got 2"});
  expect_error<mg::IndexError>([&] { mg::argmax(a, -3); }, {"argmax:", "got -3"});
  expect_error<mg::IndexError>([&] { mg::softmax(a, 2); }, {"softmax:", "got 2"});
}

TEST_CASE("errors: bad argument values") {
  expect_error<mg::ValueError>([] { mg::arange(0, 5, 0); }, {"arange:", "non-zero step"});
  expect_error<mg::ValueError>([] { mg::arange(0, 5, -1); }, {"arange:", "step -1"});
  expect_error<mg::ValueError>([] { mg::randint(3, 3, {2}); }, {"randint:", "low < high", "3 and 3"});
  expect_error<mg::ValueError>([] { mg::dropout(mg::ones({2}), 1.5); }, {"dropout:", "[0, 1]", "1.5"});
  expect_error<mg::ValueError>([] { mg::clamp(mg::ones({2}), std::nullopt, std::nullopt); }, {"clamp:", "neither"});
  expect_error<mg::ValueError>([] { mg::ones({2}).slice(0, 0, 2, 0); }, {"slice:", "positive step", "got 0"});
  expect_error<mg::ValueError>([] { mg::cat({}); }, {"cat:", "at least one tensor"});
  expect_error<mg::ValueError>(
      [] {
        mg::conv2d(mg::ones({1, 3, 4, 4}), mg::ones({2, 1, 1, 1}), {}, {1}, {0}, {1}, 3);
      },
      {"conv2d:", "divisible by groups 3"});
  expect_error<mg::ValueError>(
      [] {
        mg::max_pool2d(mg::ones({1, 1, 4, 4}), {2, 2}, {0, 1});
      },
      {"max_pool2d:", "stride >= 1", "got 0"});
  expect_error<mg::ValueError>([] { mg::Tensor().shape(); }, {"expected a defined tensor", "undefined"});
  expect_error<mg::ValueError>([] { mg::set_memory_limit(mg::kCPU, -1); }, {"set_memory_limit:", "got -1"});
}

TEST_CASE("errors: the ops ported from libtorch") {
  auto a = mg::arange(12, mg::kFloat32).view({3, 4});
  expect_error<mg::ValueError>([&] { mg::topk(a, 5, 1); }, {"topk:", "k in [0, 4]", "got 5"});
  expect_error<mg::IndexError>([&] { mg::sort(a, 2); }, {"sort:", "dim in [-2, 1]", "got 2"});
  expect_error<mg::IndexError>([&] { mg::cumsum(a, -3); }, {"cumsum:", "got -3"});
  expect_error<mg::DTypeError>([] { mg::std(mg::ones({3}, mg::kInt64)); }, {"std:", "floating", "int64"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::scatter(a, 1, mg::zeros({4, 2}, mg::kInt64), mg::ones({4, 2}));
      },
      {"scatter", "index [4, 2]", "self [3, 4]", "dim 0"});
  expect_error<mg::DTypeError>(
      [&] {
        mg::scatter_add(a, 1, mg::zeros({3, 2}, mg::kInt64), mg::ones({3, 2}, mg::kFloat64));
      },
      {"scatter_add", "src of self's dtype float32", "float64"});
  expect_error<mg::IndexError>([&] { mg::scatter(a, 1, I({0, 4}).view({1, 2}), 1.0); }, {"scatter", "got 4"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::index_add(a, 0, I({0, 2}), mg::ones({3, 4}));
      },
      {"index_add_:", "source of shape [2, 4]", "got [3, 4]"});
  expect_error<mg::IndexError>([] { mg::one_hot(I({0, 3}), 3); }, {"one_hot:", "[0, 3)", "got 3"});
  expect_error<mg::MetaTensorError>(
      [] { mg::one_hot(mg::zeros({2}, mg::TensorOptions(mg::kInt64).device(mg::kMeta))); },
      {"one_hot:", "meta", "pass num_classes"});
  expect_error<mg::ValueError>([&] { mg::flip(a, {0, -2}); }, {"flip:", "dim 0 appears more than once"});
  expect_error<mg::ShapeError>([&] { a.repeat({2}); }, {"repeat:", "at least 2 repeats", "got 1"});
  expect_error<mg::ShapeError>(
      [] {
        mg::nll_loss(mg::zeros({2, 3}), I({0, 1, 2}));
      },
      {"nll_loss:", "target of shape [2]", "got [3]"});
  expect_error<mg::IndexError>(
      [] {
        mg::nll_loss(mg::zeros({2, 3}), I({0, 3}));
      },
      {"nll_loss:", "target values in [0, 3) or ignore_index -100", "got 3"});
  expect_error<mg::ShapeError>(
      [] {
        mg::cross_entropy(mg::zeros({2, 3}), I({0, 1}), mg::ones({4}));
      },
      {"cross_entropy:", "class weight of shape [3]", "got [4]"});
  expect_error<mg::ValueError>(
      [] {
        mg::group_norm(mg::ones({2, 6, 3}), 4);
      },
      {"group_norm:", "6 channels divisible", "got 4"});
  auto q = mg::ones({2, 5, 4}), k = mg::ones({2, 6, 4});
  expect_error<mg::ValueError>(
      [&] {
        mg::scaled_dot_product_attention(q, k, k, mg::ones({5, 6}, mg::kBool), 0.0, true);
      },
      {"attention:", "either attn_mask or is_causal"});
  expect_error<mg::ShapeError>(
      [&] {
        mg::scaled_dot_product_attention(q, k, k, mg::ones({5, 7}, mg::kBool));
      },
      {"attention:", "broadcasts to [2, 5, 6]", "got [5, 7]"});
}

TEST_CASE("errors: autograd misuse") {
  expect_error<mg::AutogradError>(
      [] {
        auto x = mg::ones({2}).requires_grad_();
        auto y = (x.exp() * x).sum();
        y.backward();
        y.backward();
      },
      {"backward:", "a second time", "retain_graph"});
  expect_error<mg::AutogradError>(
      [] {
        auto x = mg::ones({2}).requires_grad_();
        auto h = x + 1.0;        // add keeps nothing
        auto y = (h * h).sum();  // mul keeps h
        h.add_(1);
        y.backward();
      },
      {"backward:", "shape [2] (float32)", "modified by an in-place operation", "expected version 0", "got version 1"});
  expect_error<mg::AutogradError>(
      [] {
        auto x = mg::ones({2, 3}).requires_grad_();
        (x * 2.0).backward();
      },
      {"backward:", "expected a scalar output", "got shape [2, 3]"});
  expect_error<mg::AutogradError>([] { mg::ones({2}).sum().backward(); }, {"backward:", "requires grad"});
  expect_error<mg::AutogradError>(
      [] {
        auto x = mg::ones({2}).requires_grad_();
        x.mul_(2.0);
      },
      {"mul_:", "leaf tensor that requires grad"});
  expect_error<mg::AutogradError>(  // a view of a non-leaf is fine (its base's history is rebased)
      [] {
        auto x = mg::ones({2}).requires_grad_();
        x.select(0, 0).mul_(mg::ones({}));
      },
      {"mul_:", "a view of a leaf tensor that requires grad", "clone()"});
  expect_error<mg::AutogradError>(
      [] {
        auto x = mg::ones({2, 3}).requires_grad_();
        auto y = x * 2.0;
        y.select(0, 0).unsqueeze(0).expand({2, 3}).add_(1.0);
      },
      {"add_:", "stride 0", "expanded view", "contiguous()"});
  expect_error<mg::ShapeError>(
      [] {
        auto x = mg::ones({2}).requires_grad_();
        (x * 2.0).backward(mg::ones({3}));
      },
      {"backward:", "gradient of shape [2]", "got [3]"});
}

TEST_CASE("errors: meta values and devices") {
  expect_error<mg::MetaTensorError>(
      [] {
        mg::ones({2, 2}, mg::kMeta).sum().item<float>();
      },
      {"meta tensor", "shape []", "no values"});
  expect_error<mg::MetaTensorError>([] { mg::ones({2}, mg::kMeta).to_vector<float>(); }, {"meta tensor", "[2]"});
  expect_error<mg::MetaTensorError>([] { mg::ones({2}, mg::kMeta).to(mg::kCPU); }, {"meta tensor", "cpu"});
  if (!mg::cuda_built()) {
    expect_error<mg::DeviceError>([] { mg::zeros({2}, mg::Device("cuda")); }, {"cuda:0", "built without CUDA"});
    expect_error<mg::DeviceError>([] { mg::ones({2}).to(mg::Device("cuda:1")); }, {"cuda:1", "built without CUDA"});
    expect_error<mg::DeviceError>([] { mg::check_device_usable(mg::cuda_device(0)); }, {"built without CUDA"});
    CHECK(mg::cuda_device_count() == 0);
    CHECK_FALSE(mg::cuda_available());
  }
  for (const char* bad : {"gpu", "", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cpu:0", "meta:1"}) {
    CAPTURE(bad);
    expect_error<mg::ValueError>([&] { (void)mg::Device(bad); }, {"Device:", std::string("'") + bad + "'"});
  }
  CHECK(mg::Device("cuda:3").index == 3);
  CHECK(mg::Device("cuda").str() == "cuda:0");
  CHECK(mg::Device("meta") == mg::kMeta);
  CHECK(mg::Device("cpu") == mg::kCPU);
}

TEST_CASE("errors: out of memory leaves the library usable") {
  LimitGuard guard;
  auto keep = mg::ones({1000});
  mg::set_memory_limit(mg::kCPU, allocated() + 16384);
  expect_error<mg::OutOfMemoryError>([] { mg::zeros({1 << 20}); },
                                     {"out of memory on cpu", "tried to allocate", "limit"});
  expect_error<mg::OutOfMemoryError>(
      [&] {
        mg::matmul(mg::ones({100, 100}), mg::ones({2, 100}).t());
      },
      {"out of memory"});
  mg::set_memory_limit(mg::kCPU, 0);
  CHECK(mg::zeros({1 << 20}).numel() == 1 << 20);
}
