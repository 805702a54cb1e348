// Autograd hooks: tensor hooks on leaves and non-leaves, post-accumulate hooks, and saved-tensor
// pack/unpack hooks (which keep the in-place version check).
#include <doctest/doctest.h>

#include <string>

#include <memgrad/memgrad.h>

#include "autograd/engine_util.h"

using namespace engine_test;

TEST_CASE("engine: tensor hooks on leaves and non-leaves") {
  auto x = f64({1, 2, 3}, {3}).requires_grad_();
  SUBCASE("observing hooks see the gradient and leave it") {
    Tensor seen_leaf, seen_mid;
    x.register_hook([&](const Tensor& g) {
      seen_leaf = g.clone();
      return Tensor();
    });
    auto h = x * 2.0;
    h.register_hook([&](const Tensor& g) {
      seen_mid = g.clone();
      return Tensor();
    });
    (h * h).sum().backward();  // dL/dh = 2h = 4x, dL/dx = 8x
    check_close(seen_mid, {4, 8, 12});
    check_close(seen_leaf, {8, 16, 24});
    check_close(x.grad(), {8, 16, 24});
  }
  SUBCASE("replacing hooks change what flows on") {
    auto h = x * 2.0;
    h.register_hook([](const Tensor& g) { return g * 10.0; });
    x.register_hook([](const Tensor& g) { return g + 1.0; });
    h.sum().backward();  // dL/dh = 1 -> 10, dL/dx = 20 -> 21
    check_close(x.grad(), {21, 21, 21});
  }
  SUBCASE("hooks chain in registration order") {
    x.register_hook([](const Tensor& g) { return g * 2.0; });
    x.register_hook([](const Tensor& g) { return g + 1.0; });
    x.sum().backward();  // (1 * 2) + 1
    check_close(x.grad(), {3, 3, 3});
  }
  SUBCASE("register_hook on a tensor without grad raises") {
    auto c = f64({1}, {1});
    CHECK_THROWS_AS(c.register_hook([](const Tensor& g) { return g; }), mg::AutogradError);
  }
}

TEST_CASE("engine: post-accumulate hooks run once per backward, after every contribution reached .grad") {
  auto w = f64({1, 2}, {2}).requires_grad_();
  std::vector<std::vector<double>> seen;  // w.grad() each time the hook ran
  const uint64_t id = w.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    CHECK(leaf.is_same(w));
    seen.push_back(values(leaf.grad()));
  });
  // w is used twice (as a tied weight is): the engine sums both paths before AccumulateGrad runs.
  ((w * 3.0).sum() + (w * w).sum()).backward();  // dL/dw = 3 + 2w = {5, 7}
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<double>{5, 7});
  (w * 1.0).sum().backward();  // accumulates: {6, 8}, and the hook sees the sum
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<double>{6, 8});
  SUBCASE("a backward that does not reach the leaf does not run it") {
    auto v = f64({1}, {1}).requires_grad_();
    (v * 2.0).sum().backward();
    CHECK(seen.size() == 2);
  }
  SUBCASE("removed hooks no longer run; unknown ids are ignored") {
    w.remove_post_accumulate_grad_hook(id);
    w.remove_post_accumulate_grad_hook(id + 1000);
    w.sum().backward();
    CHECK(seen.size() == 2);
  }
  SUBCASE("only on leaves that require grad") {
    CHECK_THROWS_AS(f64({1}, {1}).register_post_accumulate_grad_hook([](const Tensor&) {}), mg::AutogradError);
    CHECK_THROWS_AS((w * 2.0).register_post_accumulate_grad_hook([](const Tensor&) {}), mg::AutogradError);
  }
}

TEST_CASE("engine: saved-tensor hooks see every saved tensor and can repack it") {
  auto make = [] {
    return std::pair<Tensor, Tensor>{mg::tensor(std::vector<float>{0.3f, -1.2f, 2.0f, 0.7f}, {2, 2}).requires_grad_(),
                                     mg::tensor(std::vector<float>{1.5f, -0.25f}, {2}).requires_grad_()};
  };
  auto forward = [](const Tensor& x, const Tensor& w) { return mg::exp(x * w).sum(); };

  auto [x0, w0] = make();
  forward(x0, w0).backward();

  auto [x, w] = make();
  int packs = 0, unpacks = 0;
  std::vector<mg::Shape> packed_shapes;
  Tensor loss;
  {
    mg::autograd::SavedTensorHooks hooks(
        [&](const Tensor& t) -> std::any {
          ++packs;
          packed_shapes.push_back(t.shape());
          CHECK(t.dtype() == mg::kFloat32);
          return t.to(mg::kFloat64);  // stored in another form
        },
        [&](const std::any& a) {
          ++unpacks;
          Tensor t = std::any_cast<Tensor>(a);
          CHECK(t.dtype() == mg::kFloat64);
          return t.to(mg::kFloat32);
        });
    loss = forward(x, w);
  }
  // mul saves both operands, exp saves its output; sum saves nothing.
  CHECK(packs == 3);
  REQUIRE(packed_shapes.size() == 3);
  CHECK(packed_shapes[0] == mg::Shape{2, 2});
  CHECK(packed_shapes[1] == mg::Shape{2});
  CHECK(packed_shapes[2] == mg::Shape{2, 2});
  CHECK(unpacks == 0);
  loss.backward();
  CHECK(unpacks == 3);
  CHECK(mg::equal(x.grad(), x0.grad()));  // float32 -> float64 -> float32 is exact
  CHECK(mg::equal(w.grad(), w0.grad()));

  // Outside the scope nothing is packed.
  int outside = 0;
  {
    mg::autograd::SavedTensorHooks hooks([&](const Tensor& t) -> std::any { return ++outside, t; },
                                         [](const std::any& a) { return std::any_cast<Tensor>(a); });
  }
  forward(x, w).backward();
  CHECK(outside == 0);
}

TEST_CASE("engine: saved-tensor hooks keep the in-place version check") {
  // An identity pack keeps the very tensor, so an in-place change after saving would silently
  // corrupt the gradient; it must raise as it does without hooks.
  auto x = f64({1, 2, 3}, {3}).requires_grad_();
  auto h = x * 1.0;
  Tensor y;
  {
    mg::autograd::SavedTensorHooks identity([](const Tensor& t) -> std::any { return t; },
                                            [](const std::any& a) { return std::any_cast<Tensor>(a); });
    y = (h * h).sum();
  }
  h.add_(1.0);
  auto msg = autograd_error([&] { y.backward(); });
  CHECK(contains(msg, "modified by an in-place operation"));

  // A pack that copies the value away does not keep the original's bytes alive.
  const int64_t before = mg::memory_stats(mg::kCPU).allocated;
  Tensor z;
  {
    mg::autograd::SavedTensorHooks copy([](const Tensor& t) -> std::any { return t.to(mg::kFloat32); },
                                        [](const std::any& a) { return std::any_cast<Tensor>(a).to(mg::kFloat64); });
    auto big = mg::ones({1024}, mg::kFloat64).requires_grad_();
    z = mg::exp(big * 2.0);  // exp saves its float64 output; the pack keeps a float32 copy
  }
  // Live now: z (8 KiB, float64, held by us) and the packed float32 copy (4 KiB); the leaf died.
  CHECK(mg::memory_stats(mg::kCPU).allocated - before == 8192 + 4096);
}
