// The CUDA runtime (streams, events, pinned memory, async copies, device memory), the kernel
// table and variant registry, and the ledger: one training step books the same bytes on cuda
// as on the cpu. Cases tagged [no-gpu] also run on machines without a device.
#include <cstring>

#include <memgrad/kernels/backend.h>

#include "gpu_util.h"

using namespace gpu_test;

TEST_CASE("cuda: the kernel table is complete when built with CUDA [no-gpu]") {
  const kernels::Backend& b = kernels::cuda_backend();
  // Backend holds only function pointers: scan them as an array.
  constexpr size_t n = sizeof(kernels::Backend) / sizeof(void (*)());
  void (*entries[n])();
  std::memcpy(entries, &b, sizeof b);
  for (size_t i = 0; i < n; ++i) CHECK_MESSAGE((entries[i] != nullptr) == cuda_built(), "Backend entry ", i);
}

TEST_CASE("cuda: kernel variants are listed and selected by name [no-gpu]") {
  if (!cuda_built()) {
    CHECK(cuda::kernel_variants("layer_norm").empty());
    return;
  }
  CHECK(cuda::kernel_variants("layer_norm") == std::vector<std::string>{"block", "warp"});
  CHECK(cuda::kernel_variant("layer_norm") == "block");
  cuda::set_kernel_variant("layer_norm", "warp");
  CHECK(cuda::kernel_variant_index("layer_norm") == 1);
  cuda::set_kernel_variant("layer_norm", "block");
  CHECK_THROWS_AS(cuda::set_kernel_variant("layer_norm", "fastest"), ValueError);
  CHECK_THROWS_AS(cuda::set_kernel_variant("no_such_op", "block"), ValueError);
}

TEST_CASE("cuda: without a device, using cuda says why [no-gpu]") {
  if (cuda_available()) return;
  CHECK_THROWS_AS(zeros({2}, cuda_device()), DeviceError);
  CHECK_THROWS_AS(cuda::Stream::create(), DeviceError);
  CHECK_THROWS_AS(cuda::empty_pinned({4}), DeviceError);
  CHECK(cuda::pinned_bytes() == 0);
  CHECK(cuda::current_stream(0).is_default());
}

TEST_CASE("cuda: device properties and the memory outside memgrad") {
  auto p = cuda::properties(0);
  CHECK(!p.name.empty());
  CHECK(p.total_memory > 0);
  Tensor t = empty({1 << 20}, kGPU);
  auto m = cuda::device_memory(0);
  CHECK(m.total == p.total_memory);
  CHECK(m.used == m.total - m.free);
  CHECK(m.memgrad_reserved == memory_stats(kGPU).reserved);
  CHECK(m.memgrad_reserved >= int64_t(4 << 20));
  CHECK(m.outside_memgrad == m.used - m.memgrad_reserved);
  CHECK(m.outside_memgrad > 0);  // the CUDA context
}

TEST_CASE("cuda: streams, events and asynchronous copies through pinned memory") {
  const int64_t n = (1 << 20) + 3;
  Tensor host = cuda::empty_pinned({n});
  CHECK(cuda::is_pinned(host));
  CHECK(cuda::pinned_bytes() >= int64_t(n) * 4);
  host.copy_(arange(0, n, 1, kFloat32));
  cuda::Stream s = cuda::Stream::create(0);
  CHECK(!s.is_default());
  Tensor dev = empty({n}, kGPU), back = cuda::empty_pinned({n});
  {
    cuda::StreamGuard guard(s);
    CHECK(cuda::current_stream(0) == s);
    cuda::Event start(true), stop(true);
    start.record();
    cuda::copy_async(dev, host);
    Tensor doubled = dev * 2.0;  // a kernel on the same stream sees the copied bytes
    cuda::copy_async(back, doubled);
    stop.record();
    stop.synchronize();
    CHECK(stop.query());
    CHECK(start.elapsed_ms(stop) >= 0.0f);
  }
  CHECK(cuda::current_stream(0).is_default());
  expect_equal(back, arange(0, n, 1, kFloat32) * 2.0, "async round trip");
  // Another stream waits on an event recorded after work on the first.
  cuda::Stream s2 = cuda::Stream::create(0);
  cuda::Event done;
  {
    cuda::StreamGuard g1(s);
    dev.fill_(5.0);
    done.record(s);
  }
  done.wait(s2);
  {
    cuda::StreamGuard g2(s2);
    Tensor r = dev + 1.0;
    s2.synchronize();
    CHECK(r.sum().to(kCPU).item<double>() == doctest::Approx(6.0 * double(n)));
  }
  cuda::synchronize();
  Tensor pinned = cuda::pin_memory(randn({3, 5}));
  CHECK(cuda::is_pinned(pinned));
  CHECK(!cuda::is_pinned(randn({3, 5})));
}

namespace {
struct StepLedger {
  int64_t peak = 0, end = 0;
  std::array<int64_t, kNumCategories> at_peak{}, at_end{};
};
// One training step of a small transformer-like MLP on `d`, from the same cpu sources.
StepLedger train_step(const Device& d, const std::vector<Tensor>& src) {
  MemoryStats base = memory_stats(d);
  reset_peak(d);
  std::vector<Tensor> p;
  {
    MemoryScope scope(Category::Parameter);
    for (size_t i = 0; i < 5; ++i) p.push_back((d.is_cpu() ? src[i].clone() : src[i].to(d)).requires_grad_());
  }
  Tensor x, target;
  {
    MemoryScope scope(Category::Input);
    x = d.is_cpu() ? src[5].clone() : src[5].to(d);
    target = d.is_cpu() ? src[6].clone() : src[6].to(d);
  }
  {
    Tensor h = gelu(linear(x, p[0], p[1]));
    h = layer_norm(dropout(h, 0.1), {64}, p[2], p[3]);
    Tensor loss = cross_entropy(linear(h, p[4]), target);
    loss.backward();
  }
  MemoryStats s = memory_stats(d);
  StepLedger r;
  r.peak = s.peak_allocated - base.allocated;
  r.end = s.allocated - base.allocated;
  for (int c = 0; c < kNumCategories; ++c) {
    r.at_peak[size_t(c)] = s.at_peak_by_category[size_t(c)] - base.by_category[size_t(c)];
    r.at_end[size_t(c)] = s.by_category[size_t(c)] - base.by_category[size_t(c)];
  }
  return r;
}
}  // namespace

TEST_CASE("cuda: one training step books the same bytes on cuda as on the cpu") {
  manual_seed(21);
  std::vector<Tensor> src = {randn({64, 33}) * 0.1, zeros({64}),     ones({64}),          zeros({64}),
                             randn({50, 64}) * 0.1, randn({24, 33}), randint(0, 50, {24})};
  manual_seed(5);
  StepLedger c = train_step(kCPU, src);
  manual_seed(5);
  StepLedger g = train_step(kGPU, src);
  CHECK(g.peak == c.peak);
  CHECK(g.end == c.end);
  for (int k = 0; k < kNumCategories; ++k) {
    CHECK_MESSAGE(g.at_peak[size_t(k)] == c.at_peak[size_t(k)], category_name(Category(k)), " at peak");
    CHECK_MESSAGE(g.at_end[size_t(k)] == c.at_end[size_t(k)], category_name(Category(k)), " at end");
  }
  CHECK(c.peak > 0);
}

TEST_CASE("cuda: the memory limit raises OutOfMemoryError on the gpu as on the cpu") {
  int64_t before = memory_stats(kGPU).allocated;
  set_memory_limit(kGPU, before + 4096);
  Tensor ok = empty({1024}, kGPU);
  CHECK_THROWS_AS(empty({1024}, kGPU), OutOfMemoryError);
  set_memory_limit(kGPU, 0);
  Tensor fine = empty({1024}, kGPU);
  CHECK(memory_stats(kGPU).allocated == before + 8192);
}
