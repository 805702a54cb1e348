// KernelProfile (core/profile.h): every kernel a thread runs is counted once, under its own name,
// by every profile alive on that thread, and by no other thread's. Calls are exact integers; times
// are only checked to add up, never against a clock.
#include <doctest/doctest.h>

#include <thread>

#include <memgrad/memgrad.h>

using namespace mg;

TEST_CASE("profile: each kernel call counted once under its kernel's name") {
  Tensor a = randn({64, 64}), b = randn({64, 64});
  KernelProfile p;
  Tensor c = a + b;
  c = c * b;
  c = c - a;
  Tensor m = matmul(a, b);
  CHECK(p.calls("binary") == 3);
  CHECK(p.calls("matmul") == 1);
  CHECK(p.calls("layer_norm") == 0);
  CHECK(p.seconds("layer_norm") == 0);
  CHECK(p.seconds("matmul") > 0);
  const auto entries = p.entries();
  REQUIRE(entries.size() == 2);
  double sum = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    sum += entries[i].seconds;
    if (i) CHECK(entries[i - 1].seconds >= entries[i].seconds);  // longest first
  }
  CHECK(sum == doctest::Approx(p.seconds()).epsilon(1e-12));
  p.reset();
  CHECK(p.entries().empty());
  c = a + b;
  CHECK(p.calls("binary") == 1);
}

TEST_CASE("profile: a backward's kernels are profiled too") {
  Tensor a = randn({8, 16}).requires_grad_(), b = randn({16, 4}).requires_grad_();
  KernelProfile p;
  Tensor loss = matmul(a, b).sum();
  CHECK(p.calls("matmul") == 1);
  loss.backward();
  CHECK(p.calls("matmul") == 3);  // the forward, then dL/da and dL/db
}

TEST_CASE("profile: only the outermost kernel counts; a kernel's own kernels are part of its time") {
  // The cpu matmul of bfloat16 widens its operands to float with copy kernels, run inside it.
  Tensor a = randn({16, 16}).to(kBFloat16), b = randn({16, 16}).to(kBFloat16);
  KernelProfile p;
  Tensor c = matmul(a, b);
  CHECK(p.calls("matmul") == 1);
  CHECK(p.calls("copy") == 0);
  CHECK(p.entries().size() == 1);
  c = a.to(kFloat32);  // the same copy kernel, run by an op, counts
  CHECK(p.calls("copy") == 1);
}

TEST_CASE("profile: profiles nest, and each sees what ran while it was alive") {
  Tensor a = randn({32}), b = randn({32});
  KernelProfile outer;
  Tensor c = a + b;
  {
    KernelProfile inner;
    c = c + b;
    c = c + b;
    CHECK(inner.calls("binary") == 2);
  }
  c = c + b;
  CHECK(outer.calls("binary") == 4);
}

TEST_CASE("profile: another thread's kernels are not this thread's; meta runs none") {
  Tensor a = randn({32}), b = randn({32});
  KernelProfile p;
  std::thread([&] {
    Tensor c = a + b;
    KernelProfile theirs;
    c = c + b;
    CHECK(theirs.calls("binary") == 1);
  }).join();
  CHECK(p.entries().empty());
  auto meta = TensorOptions().device(kMeta);
  Tensor x = randn({128, 128}, meta), y = matmul(x, x) + x;
  CHECK(p.entries().empty());
}

TEST_CASE("profile: an op that raises leaves the profile counting") {
  Tensor a = randn({4, 5}), b = randn({4, 5});
  KernelProfile p;
  CHECK_THROWS_AS(matmul(a, b), ShapeError);
  CHECK(p.entries().empty());
  Tensor c = matmul(a, b.t());
  CHECK(p.calls("matmul") == 1);
}
