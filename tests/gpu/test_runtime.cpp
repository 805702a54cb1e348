// The CUDA runtime (streams, events, pinned memory, async copies, device memory), the kernel
// table and variant registry, and the ledger: one training step books the same bytes on cuda
// as on the cpu. Cases tagged [no-gpu] also run on machines without a device.
#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/kernels/backend.h>

#include "gpu_util.h"

using namespace gpu_test;

TEST_CASE("cuda: the kernel table is complete when built with CUDA [no-gpu]") {
  std::vector<std::string> missing = kernels::missing_kernels(kernels::cuda_backend());
  if (cuda_built())
    CHECK_MESSAGE(missing.empty(), "cuda lacks ", missing.size(),
                  " kernels, the first: ", missing.empty() ? "" : missing[0]);
  else
    CHECK(missing == kernels::missing_kernels(kernels::Backend{}));  // built without CUDA: all null
  CHECK_MESSAGE(kernels::missing_kernels(kernels::cpu_backend()).empty(), "the cpu backend lacks a kernel");
}

TEST_CASE("cuda: kernel variants are listed and selected by name [no-gpu]") {
  if (!cuda_built()) {
    CHECK(cuda::kernel_variants("layer_norm").empty());
    CHECK(cuda::kernel_variants("conv2d").empty());
    return;
  }
  CHECK(cuda::kernel_variants("layer_norm") == std::vector<std::string>{"block", "warp"});
  CHECK(cuda::kernel_variant("layer_norm") == "block");
  cuda::set_kernel_variant("layer_norm", "warp");
  CHECK(cuda::kernel_variant("layer_norm") == "warp");
  cuda::set_kernel_variant("layer_norm", "block");
  CHECK_THROWS_AS(cuda::set_kernel_variant("layer_norm", "fastest"), ValueError);
  CHECK_THROWS_AS(cuda::set_kernel_variant("no_such_op", "block"), ValueError);
  // conv2d: cuDNN first when built with it (-DMG_CUDNN, on by default), the im2col lowering always.
  auto conv = cuda::kernel_variants("conv2d");
  CHECK((conv == std::vector<std::string>{"cudnn", "im2col"} || conv == std::vector<std::string>{"im2col"}));
  CHECK(cuda::kernel_variant("conv2d") == conv.front());
  cuda::set_kernel_variant("conv2d", "im2col");
  CHECK(cuda::kernel_variant("conv2d") == "im2col");
  cuda::set_kernel_variant("conv2d", conv.front());
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

// ---- streams and the caching allocator: blocks belong to the stream they were allocated on;
// record_stream defers a block's reuse until the other stream's work is done.

namespace {
void* data_of(const Tensor& t) { return t.storage()->data(); }

// The ledger against the segment layout: live blocks and blocks waiting for other streams make
// `active`; only live blocks count in `allocated`, and the categories sum to it.
void check_ledger(const Device& d) {
  MemoryStats s = memory_stats(d);
  int64_t reserved = 0, active = 0, allocated = 0;
  for (const SegmentInfo& seg : memory_segments(d)) {
    reserved += seg.size;
    for (const BlockInfo& b : seg.blocks)
      if (b.in_use) active += b.size, allocated += b.allocated;
  }
  CHECK(reserved == s.reserved);
  CHECK(active == s.active);
  CHECK(allocated == s.allocated);
  int64_t by_category = 0;
  for (int64_t bytes : s.by_category) by_category += bytes;
  CHECK(by_category == s.allocated);
}

constexpr int64_t kSide = 4096;                      // a kSide x kSide float32 matrix:
constexpr int64_t kMatrixBytes = kSide * kSide * 4;  // 64 MiB, a segment of its own
// Queues about 50 ms of matmuls reading `x` on stream `s` (the results are dropped on `s`).
void keep_busy_reading(const cuda::Stream& s, const Tensor& x) {
  cuda::StreamGuard on(s);
  for (int i = 0; i < 20; ++i) Tensor y = matmul(x, x);
}
// A matrix allocated and written on the current stream, finished before other streams read it.
Tensor written_matrix() {
  Tensor x = empty({kSide, kSide}, kGPU);
  x.fill_(1.0 / double(kSide));
  cuda::current_stream(0).synchronize();
  return x;
}
}  // namespace

TEST_CASE("cuda: record_stream checks its arguments [no-gpu]") {
  CHECK_THROWS_AS(cuda::record_stream(Tensor(), cuda::Stream()), ValueError);
  CHECK_THROWS_AS(cuda::record_stream(zeros({2}), cuda::Stream()), DeviceError);
  CHECK_THROWS_AS(cuda::record_stream(empty({2}, kMeta), cuda::Stream()), DeviceError);
  if (!cuda_available()) return;
  Tensor t = zeros({2}, kGPU);
  CHECK_THROWS_AS(cuda::record_stream(t, cuda::Stream(1, nullptr)), DeviceError);
  cuda::record_stream(t, cuda::current_stream(0));  // its own stream: nothing to wait for
}

TEST_CASE("cuda streams: a block freed on one stream is reused on that stream, not on another") {
  cuda::Stream a = cuda::Stream::create(0), b = cuda::Stream::create(0);
  const int64_t n = 1 << 16;  // 256 KiB: the small pool
  void* first = nullptr;
  {
    cuda::StreamGuard on_a(a);
    first = data_of(empty({n}, kGPU));  // released at once, into a's pool
  }
  const int64_t reserved = memory_stats(kGPU).reserved;
  {
    cuda::StreamGuard on_b(b);
    Tensor t = empty({n}, kGPU);
    CHECK(data_of(t) != first);
    CHECK(memory_stats(kGPU).reserved == reserved + int64_t(memory::kSmallSegment));  // b's own segment
  }
  Tensor on_default = empty({n}, kGPU);
  CHECK(data_of(on_default) != first);
  {
    cuda::StreamGuard on_a(a);
    Tensor t = empty({n}, kGPU);
    CHECK(data_of(t) == first);
  }
  check_ledger(kGPU);
}

TEST_CASE("cuda streams: record_stream keeps a block from reuse until the other stream's work is done") {
  cuda::Stream a = cuda::Stream::create(0), b = cuda::Stream::create(0);
  cuda::StreamGuard on_a(a);
  Tensor x = written_matrix();
  void* xp = data_of(x);
  keep_busy_reading(b, x);
  cuda::record_stream(x, b);
  cuda::record_stream(x, b);  // twice is once
  MemoryStats before = memory_stats(kGPU);
  x = Tensor();  // released while b still reads it
  MemoryStats after = memory_stats(kGPU);
  CHECK(after.allocated == before.allocated - kMatrixBytes);  // the ledger frees it now...
  CHECK(after.active == before.active);                       // ...but the block is still in use
  CHECK(after.reserved == before.reserved);
  CHECK(after.cached() == before.cached());
  check_ledger(kGPU);

  Tensor z = empty({kSide, kSide}, kGPU);  // on a, the same size
  const bool busy = !b.query();            // still busy after the allocation, so during it too
  if (busy) {
    CHECK(data_of(z) != xp);                                               // x's block was not on offer
    CHECK(memory_stats(kGPU).reserved >= before.reserved + kMatrixBytes);  // z needed a segment of its own
  } else {
    WARN_MESSAGE(false, "stream b finished its matmuls before the allocation; the reuse checks were skipped");
  }
  check_ledger(kGPU);

  b.synchronize();
  Tensor w = empty({kSide, kSide}, kGPU);  // b is done: at this allocation x's block is free again
  if (busy) CHECK(data_of(w) == xp);
  MemoryStats end = memory_stats(kGPU);
  CHECK(end.allocated == before.allocated + kMatrixBytes);  // z and w live, x gone
  CHECK(end.active == before.active + kMatrixBytes);
  check_ledger(kGPU);
}

TEST_CASE("cuda streams: empty_cache waits for deferred frees and returns their segments") {
  cuda::Stream a = cuda::Stream::create(0), b = cuda::Stream::create(0);
  cuda::StreamGuard on_a(a);
  Tensor x = written_matrix();
  const uint64_t base = uint64_t(reinterpret_cast<uintptr_t>(data_of(x)));
  keep_busy_reading(b, x);
  cuda::record_stream(x, b);
  const MemoryStats before = memory_stats(kGPU);
  x = Tensor();
  empty_cache(kGPU);
  CHECK(b.query());  // the event recorded at the release, after all of b's matmuls, was waited for
  for (const SegmentInfo& seg : memory_segments(kGPU)) CHECK(seg.address != base);
  const MemoryStats after = memory_stats(kGPU);
  CHECK(after.reserved <= before.reserved - kMatrixBytes);
  CHECK(after.num_segment_frees > before.num_segment_frees);
  check_ledger(kGPU);
}

TEST_CASE("cuda streams: the out-of-memory retry waits for deferred frees") {
  cuda::Stream a = cuda::Stream::create(0), b = cuda::Stream::create(0);
  cuda::StreamGuard on_a(a);
  empty_cache(kGPU);
  Tensor x = written_matrix();
  void* xp = data_of(x);
  keep_busy_reading(b, x);
  cuda::record_stream(x, b);
  x = Tensor();
  // Room for no new 64 MiB segment: only x's block, once b is done, can serve the request.
  const MemoryStats before = memory_stats(kGPU);
  set_memory_limit(kGPU, before.reserved + kMatrixBytes / 2);
  Tensor y;
  CHECK_NOTHROW(y = empty({kSide, kSide}, kGPU));  // x's block, once b is done (waited for if need be)
  set_memory_limit(kGPU, 0);
  CHECK(b.query());
  CHECK(data_of(y) == xp);
  CHECK(memory_stats(kGPU).num_ooms == before.num_ooms);
  check_ledger(kGPU);
}

TEST_CASE("cuda streams: the out-of-memory path reuses a deferred block whose segment stays in use") {
  cuda::Stream a = cuda::Stream::create(0), b = cuda::Stream::create(0);
  cuda::StreamGuard on_a(a);
  empty_cache(kGPU);
  Tensor big = written_matrix();
  const int64_t n = int64_t(9) << 18;  // 9 MiB of float32
  // One 20 MiB segment on a: x, then y, then 3 MiB free. y keeps the segment from being returned.
  Tensor x = empty({n}, kGPU), y = empty({int64_t(8) << 18}, kGPU);
  void* xp = data_of(x);
  keep_busy_reading(b, big);
  cuda::record_stream(x, b);
  x = Tensor();  // deferred until b's matmuls are done
  const MemoryStats before = memory_stats(kGPU);
  set_memory_limit(kGPU, before.reserved);  // no new segment of any size
  Tensor z;
  CHECK_NOTHROW(z = empty({n}, kGPU));
  set_memory_limit(kGPU, 0);
  CHECK(b.query());
  CHECK(data_of(z) == xp);  // the wait freed x's block, and the pool was searched again
  CHECK(memory_stats(kGPU).num_ooms == before.num_ooms);
  check_ledger(kGPU);
}

TEST_CASE("cuda: a failing cudaFree is raised by the next allocation, and neither call moves the current device") {
  const int before = cuda::current_device();
  int not_device_memory = 0;
  CHECK_NOTHROW(cuda::free(0, &not_device_memory));  // runs inside release(): it must not throw
  CHECK_THROWS_WITH_AS(cuda::malloc(0, 512), doctest::Contains("cudaFree"), DeviceError);
  void* p = cuda::malloc(0, 512);  // the error was raised once: the runtime is usable again
  CHECK(p != nullptr);
  cuda::free(0, p);
  CHECK(cuda::current_device() == before);
}

TEST_CASE("cuda budget: the host bytes of a copy out outlive the tensor until the copy's event is seen") {
  // Offload copies out on a side stream and records an event; the pinned bytes must stay until the
  // runtime sees that event complete, not go (through cudaFreeHost's synchronising) when the tensor
  // dies. `a` (8 MiB) is the one storage that may leave, and the filler cannot fit beside it.
  const int64_t mib = int64_t(1) << 20;
  empty_cache(kGPU);
  budget::Options o;
  o.limit = memory_stats(kGPU).reserved + 256 * mib;  // set exactly below, once `a` is made
  o.remat = budget::Remat::None;
  o.offload = budget::Offload::All;
  budget::enable(kGPU, o);
  Tensor a = full({2048, 1024}, 3.0, kGPU);
  const MemoryStats s = memory_stats(kGPU);
  const int64_t filler_bytes = (s.largest_free_block + 2 * mib - 1) / (2 * mib) * (2 * mib) + 4 * mib;
  set_memory_limit(kGPU, s.reserved + filler_bytes - 4 * mib);
  const int64_t pinned_before = cuda::pinned_bytes();
  Tensor filler = zeros({filler_bytes / 4}, kGPU);
  REQUIRE_FALSE(budget::is_resident(a));
  const int64_t held = cuda::pinned_bytes();
  CHECK(held >= pinned_before + 8 * mib);
  a = Tensor();                         // its copy out's host bytes go with the copy, not with it
  CHECK(cuda::pinned_bytes() == held);  // (without the event they went here, in cudaFreeHost)
  CHECK(budget::stats(kGPU).host_bytes == 0);
  cuda::synchronize(0);
  budget::disable(kGPU);
  set_memory_limit(kGPU, 0);
}

TEST_CASE("cuda: layer_norm backward on tall inputs (row slices): the cpu's gradients, meta's Workspace") {
  manual_seed(12);
  // 2048 rows of 96: 3 column blocks in 8 slices of 256 rows (layer_norm_wb_slices), summed in order.
  for (DType t : {kFloat32, kBFloat16}) {
    Tensor x = randn({2048, 96}).to(t), w = (randn({96}) + 1).to(t), b = randn({96}).to(t);
    parity("layer_norm 2048 x 96 " + std::string(dtype_name(t)), {x, w, b},
           [](const std::vector<Tensor>& in) { return layer_norm(in[0], {96}, in[1], in[2]); });
  }
  // The slices' scratch ([8, 2, 96] float32: 6 KiB) on cuda, and what a plan for cuda books on meta.
  auto workspace_peak = [](const Device& d) {
    Tensor x = randn({2048, 96}).to(d).requires_grad_(), w = ones({96}, d).requires_grad_();
    Tensor y = layer_norm(x, {96}, w, Tensor());
    reset_peak(d);
    y.backward(ones_like(y));
    return memory_stats(d).peak(Category::Workspace);
  };
  const int64_t on_cuda = workspace_peak(kGPU);
  int64_t on_meta = 0;
  {
    MetaTargetGuard target(DeviceType::CUDA);
    on_meta = workspace_peak(kMeta);
  }
  CHECK(on_cuda == on_meta);
  CHECK(on_cuda >= 8 * 2 * 96 * 4);
}
