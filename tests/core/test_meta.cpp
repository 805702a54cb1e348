// The meta device: every op gives the shapes and dtypes it gives on CPU without touching bytes
// (meta addresses are fake: a kernel that ran would crash), values cannot be read, and a
// forward + backward fills the meta ledger exactly as the same run on CPU fills the CPU one.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

namespace {

using Fn = std::function<mg::Tensor(const std::vector<mg::Tensor>&)>;

struct Case {
  std::string name;
  std::vector<mg::Tensor> inputs;  // cpu
  Fn fn;
};

mg::Tensor I(const std::vector<int64_t>& v, const mg::Shape& s) { return mg::tensor(v, s); }

std::vector<Case> cases() {
  mg::GeneratorStateGuard restore;
  mg::manual_seed(3);
  auto a = mg::randn({2, 3, 4}), b = mg::randn({3, 1}), m = mg::randn({4, 5}), v = mg::randn({4});
  auto img = mg::randn({2, 3, 6, 6}), k = mg::randn({4, 3, 3, 3}), kb = mg::randn({4});
  auto ints = mg::randint(0, 3, {2, 3}), lbl = mg::randint(0, 4, {6});
  auto cond = mg::rand({3, 4}) > 0.5;
  using L = std::vector<mg::Tensor>;
  return {
      {"add", {a, b}, [](const L& x) { return x[0] + x[1]; }},
      {"sub_alpha", {a, b}, [](const L& x) { return mg::sub(x[0], x[1], 2); }},
      {"mul_scalar", {a}, [](const L& x) { return x[0] * 2.5; }},
      {"div_int", {ints}, [](const L& x) { return x[0] / x[0]; }},
      {"pow", {a}, [](const L& x) { return x[0].pow(3); }},
      {"exp", {a}, [](const L& x) { return mg::exp(x[0]); }},
      {"relu", {a}, [](const L& x) { return mg::relu(x[0]); }},
      {"gelu", {a}, [](const L& x) { return mg::gelu(x[0], mg::GeluApprox::Tanh); }},
      {"sqrt_int", {ints}, [](const L& x) { return mg::sqrt(x[0]); }},
      {"clamp", {a}, [](const L& x) { return mg::clamp(x[0], -0.5, 0.5); }},
      {"where", {cond, a}, [](const L& x) { return mg::where(x[0], x[1], mg::zeros({}, x[1].device())); }},
      {"masked_fill", {a, cond}, [](const L& x) { return mg::masked_fill(x[0], x[1], 0.0); }},
      {"lt", {a, b}, [](const L& x) { return x[0] < x[1]; }},
      {"half", {a}, [](const L& x) { return x[0].to(mg::kFloat16) * x[0].to(mg::kFloat16); }},
      {"sum",
       {a},
       [](const L& x) {
         return x[0].sum({0, 2}, true);
       }},
      {"sum_int", {ints}, [](const L& x) { return x[0].sum(); }},
      {"mean", {a}, [](const L& x) { return x[0].mean({1}); }},
      {"var", {a}, [](const L& x) { return x[0].var({-1}); }},
      {"amax",
       {a},
       [](const L& x) {
         return mg::amax(x[0], {0, 2});
       }},
      {"max_values", {a}, [](const L& x) { return std::get<0>(mg::max(x[0], 1)); }},
      {"max_indices", {a}, [](const L& x) { return std::get<1>(mg::max(x[0], 1, true)); }},
      {"argmax", {a}, [](const L& x) { return mg::argmax(x[0], -1); }},
      {"softmax", {a}, [](const L& x) { return mg::softmax(x[0], 1); }},
      {"log_softmax", {a}, [](const L& x) { return mg::log_softmax(x[0], -1); }},
      {"matmul", {a, m}, [](const L& x) { return mg::matmul(x[0], x[1]); }},
      {"matmul_vec", {a, v}, [](const L& x) { return mg::matmul(x[0], x[1]); }},
      {"matmul_batched", {a, a}, [](const L& x) { return mg::matmul(x[0], x[1].transpose(1, 2)); }},
      {"linear", {a, m, mg::randn({5})}, [](const L& x) { return mg::linear(x[0], x[1].t(), x[2]); }},
      {"conv2d",
       {img, k, kb},
       [](const L& x) {
         return mg::conv2d(x[0], x[1], x[2], {2, 2}, {1, 1});
       }},
      {"conv2d_groups",
       {img},
       [](const L& x) {
         return mg::conv2d(x[0], mg::ones({6, 1, 3, 3}, x[0].device()), {}, {1, 1}, {0, 0}, {2, 2}, 3);
       }},
      {"max_pool2d",
       {img},
       [](const L& x) {
         return mg::max_pool2d(x[0], {2, 2});
       }},
      {"avg_pool2d",
       {img},
       [](const L& x) {
         return mg::avg_pool2d(x[0], {3, 3}, {2, 2}, {1, 1});
       }},
      {"layer_norm", {a, v, v}, [](const L& x) { return mg::layer_norm(x[0], {4}, x[1], x[2]); }},
      {"cross_entropy", {a.view({6, 4}), lbl}, [](const L& x) { return mg::cross_entropy(x[0], x[1]); }},
      {"cross_entropy_none",
       {a, ints},
       [](const L& x) { return mg::cross_entropy(x[0].transpose(1, 2), x[1], -100, 0.1, mg::Reduction::None); }},
      {"mse_loss", {a}, [](const L& x) { return mg::mse_loss(x[0], x[0] * 2); }},
      {"dropout", {a}, [](const L& x) { return mg::dropout(x[0], 0.25); }},
      {"view",
       {a},
       [](const L& x) {
         return x[0].view({4, -1});
       }},
      {"reshape_copy", {a}, [](const L& x) { return x[0].transpose(0, 2).reshape({-1}); }},
      {"permute",
       {a},
       [](const L& x) {
         return x[0].permute({1, 2, 0});
       }},
      {"select", {a}, [](const L& x) { return x[0].select(1, -1); }},
      {"narrow", {a}, [](const L& x) { return x[0].narrow(2, 1, 2); }},
      {"slice", {a}, [](const L& x) { return x[0].slice(2, 0, 4, 3); }},
      {"expand",
       {b},
       [](const L& x) {
         return x[0].expand({5, 3, 7});
       }},
      {"squeeze", {b}, [](const L& x) { return x[0].squeeze(); }},
      {"unsqueeze", {a}, [](const L& x) { return x[0].unsqueeze(-1); }},
      {"flatten", {a}, [](const L& x) { return x[0].flatten(1); }},
      {"contiguous", {a}, [](const L& x) { return x[0].t().contiguous(); }},
      {"clone", {a}, [](const L& x) { return x[0].clone(); }},
      {"to_bf16", {a}, [](const L& x) { return x[0].to(mg::kBFloat16); }},
      {"cat",
       {a, a},
       [](const L& x) {
         return mg::cat({x[0], x[1]}, 1);
       }},
      {"stack",
       {a, a},
       [](const L& x) {
         return mg::stack({x[0], x[1]}, -1);
       }},
      {"split", {a}, [](const L& x) { return mg::split(x[0], 3, 2)[1]; }},
      {"chunk", {a}, [](const L& x) { return mg::chunk(x[0], 2, 1)[0]; }},
      {"gather", {a, I({0, 2, 1, 0}, {1, 1, 4})}, [](const L& x) { return mg::gather(x[0], 1, x[1]); }},
      {"index_select", {a, I({2, 0}, {2})}, [](const L& x) { return mg::index_select(x[0], 1, x[1]); }},
      {"embedding", {m, I({0, 3, 3}, {3, 1})}, [](const L& x) { return mg::embedding(x[0], x[1]); }},
      {"tril", {a}, [](const L& x) { return mg::tril(x[0], 1); }},
      {"triu", {m}, [](const L& x) { return mg::triu(x[0]); }},
  };
}

void check_no_values(const mg::Tensor& t) {
  CHECK_THROWS_AS(t.raw_data(), mg::MetaTensorError);
  CHECK_THROWS_AS(t.to_vector<float>(), mg::MetaTensorError);
  CHECK_THROWS_AS(t.contiguous().to_vector<double>(), mg::MetaTensorError);
}

}  // namespace

TEST_CASE("meta: every op gives CPU's shape and dtype and touches no CPU memory") {
  for (auto& c : cases()) {
    CAPTURE(c.name);
    std::vector<mg::Tensor> meta;
    for (auto& t : c.inputs) meta.push_back(t.to(mg::kMeta));
    mg::Tensor want, got;
    uint64_t cpu_offset, meta_offset;
    {
      mg::GeneratorStateGuard restore;
      want = c.fn(c.inputs);
      cpu_offset = mg::default_generator().offset();
    }
    const int64_t cpu_before = mg::memory_stats(mg::kCPU).allocated;
    const int64_t cpu_allocs = mg::memory_stats(mg::kCPU).num_allocs;
    {
      mg::GeneratorStateGuard restore;
      got = c.fn(meta);
      meta_offset = mg::default_generator().offset();
    }
    CHECK(mg::memory_stats(mg::kCPU).allocated == cpu_before);
    CHECK(mg::memory_stats(mg::kCPU).num_allocs == cpu_allocs);
    CHECK(got.is_meta());
    CHECK(got.shape() == want.shape());
    CHECK(got.dtype() == want.dtype());
    CHECK(got.strides() == want.strides());
    CHECK(meta_offset == cpu_offset);  // random ops advance the generator as on CPU
  }
}

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
