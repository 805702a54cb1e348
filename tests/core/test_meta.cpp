// The meta device: factories book bytes without touching any, values cannot be read, and a
// training step fills the meta ledger exactly as the same run on CPU fills the CPU one. Each op's
// shapes, dtypes and ledger on meta against the CPU are "<op>: meta books the CPU's bytes" in the
// ops suite (tests/ops).
#include <doctest/doctest.h>

#include <vector>

#include <memgrad/memgrad.h>

namespace {

void check_no_values(const mg::Tensor& t) {
  CHECK_THROWS_AS(t.raw_data(), mg::MetaTensorError);
  CHECK_THROWS_AS(t.to_vector<float>(), mg::MetaTensorError);
  CHECK_THROWS_AS(t.contiguous().to_vector<double>(), mg::MetaTensorError);
}

}  // namespace

TEST_CASE("meta: factories") {
  mg::GeneratorStateGuard restore;
  const int64_t cpu_before = mg::memory_stats(mg::kCPU).allocated;
  const int64_t meta_before = mg::memory_stats(mg::kMeta).allocated;
  auto o = mg::TensorOptions().device(mg::kMeta);
  std::vector<mg::Tensor> ts{mg::zeros({3, 4}, o),
                             mg::ones({5}, o),
                             mg::full({2}, 7, o),
                             mg::empty({1000, 1000}, o),
                             mg::arange(10, 0, -2, mg::TensorOptions(mg::kInt64).device(mg::kMeta)),
                             mg::linspace(0, 1, 9, o),
                             mg::eye(4, o),
                             mg::rand({6}, o),
                             mg::randn({6}, o),
                             mg::randint(0, 5, {6}, mg::TensorOptions(mg::kInt64).device(mg::kMeta))};
  for (auto& t : ts) CHECK(t.is_meta());
  CHECK(ts[3].nbytes() == 4000000);
  CHECK(ts[4].shape() == mg::Shape{5});
  CHECK(ts[5].shape() == mg::Shape{9});
  CHECK(ts[6].shape() == mg::Shape{4, 4});
  CHECK(mg::memory_stats(mg::kCPU).allocated == cpu_before);
  // The ledger counts meta bytes as it would count real ones: 4 MB plus nine 512-byte blocks.
  CHECK(mg::memory_stats(mg::kMeta).allocated - meta_before == 4000256 + 9 * 512);
  ts.clear();
  CHECK(mg::memory_stats(mg::kMeta).allocated == meta_before);
}

TEST_CASE("meta: reading values raises MetaTensorError") {
  auto m = mg::ones({2, 2}, mg::kMeta);
  CHECK_THROWS_AS(m.item<float>(), mg::ShapeError);  // the shape check comes first
  CHECK_THROWS_AS(m.sum().item<float>(), mg::MetaTensorError);
  CHECK_THROWS_AS(m.data_ptr<float>(), mg::MetaTensorError);
  CHECK_THROWS_AS(m.data_ptr<double>(), mg::DTypeError);
  check_no_values(m);
  check_no_values(m.t());
  CHECK_THROWS_WITH_AS(m.raw_data(),
                       doctest::Contains("meta tensor has a shape [2, 2] and dtype float32 but no values"),
                       mg::MetaTensorError);
  CHECK_THROWS_AS(m.to(mg::kCPU), mg::MetaTensorError);
  CHECK_THROWS_AS(mg::equal(m, m), mg::MetaTensorError);
  CHECK_THROWS_AS(mg::ones({2}).copy_(mg::ones({2}, mg::kMeta)), mg::MetaTensorError);
  CHECK_THROWS_AS(mg::from_blob(nullptr, {0}, mg::kMeta), mg::DeviceError);
}

TEST_CASE("meta: a small MLP trains a step and fills the ledger exactly like CPU") {
  auto run = [](const mg::Device& d) {
    mg::GeneratorStateGuard restore;
    mg::manual_seed(11);
    auto o = mg::TensorOptions().device(d);
    auto w1 = mg::randn({32, 16}, o).requires_grad_(), b1 = mg::zeros({32}, o).requires_grad_();
    auto w2 = mg::randn({4, 32}, o).requires_grad_(), b2 = mg::zeros({4}, o).requires_grad_();
    auto g = mg::ones({16}, o).requires_grad_();
    const auto before = mg::memory_stats(d);
    mg::reset_peak(d);
    auto x = mg::randn({8, 16}, o);
    auto target = mg::randint(0, 4, {8}, mg::TensorOptions(mg::kInt64).device(d));
    auto h = mg::dropout(mg::gelu(mg::linear(mg::layer_norm(x, {16}, g), w1, b1)), 0.1);
    auto loss = mg::cross_entropy(mg::linear(h, w2, b2), target);
    CHECK(loss.dim() == 0);
    loss.backward();
    for (auto* p : {&w1, &b1, &w2, &b2, &g}) {
      REQUIRE(p->grad().defined());
      CHECK(p->grad().shape() == p->shape());
      CHECK(p->grad().device() == d);
    }
    auto after = mg::memory_stats(d);
    auto delta = [&](mg::Category c) { return after.category(c) - before.category(c); };
    return std::vector<int64_t>{after.peak_allocated - before.allocated, after.allocated - before.allocated,
                                delta(mg::Category::Gradient),           delta(mg::Category::Activation),
                                delta(mg::Category::Temporary),          after.num_allocs - before.num_allocs};
  };
  const int64_t meta_before = mg::memory_stats(mg::kMeta).allocated;
  auto cpu = run(mg::kCPU);
  auto meta = run(mg::kMeta);
  CHECK(meta == cpu);
  CHECK(meta[0] > 0);
  CHECK(mg::memory_stats(mg::kMeta).allocated == meta_before);  // everything freed again
}
