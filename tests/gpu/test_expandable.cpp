// Expandable segments on cuda (core/cuda/runtime.cu's vm_*: the driver's virtual memory calls, fetched
// at run time): pages reserved, mapped, written and read, a failed map that leaves nothing mapped
// behind it, unmapped pages that go back to the device; then the allocator over them, whose segment
// grows under live tensors that keep their values, shrinks on empty_cache, and books the bytes meta
// books for a cuda target, step for step.
#include <memgrad/core/cuda/runtime_impl.h>

#include <cstdlib>
#include <optional>
#include <random>

#include "gpu_util.h"
#include "memory/layout_check.h"

using namespace gpu_test;

namespace {

constexpr size_t kPage = memory::kExpandablePage;

struct Expandable {
  bool before = allocator_config().expandable_segments;
  Expandable() { set_allocator_config("expandable_segments:True"); }
  ~Expandable() { set_allocator_config(before ? "expandable_segments:True" : "expandable_segments:False"); }
};

// The device's free bytes moved by less than a page (the driver's own bookkeeping may take a little).
bool about(int64_t a, int64_t b) { return std::llabs(a - b) < int64_t(kPage); }

}  // namespace

TEST_CASE("cuda expandable: the driver's pages mapped, written, read and unmapped; a failed map keeps nothing") {
  const int device = cuda::current_device();
  const int64_t free0 = cuda::device_memory(0).free;
  void* base = cuda::vm_reserve(0, 8 * kPage);
  REQUIRE(base != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(base) % kPage == 0);
  const uintptr_t a = reinterpret_cast<uintptr_t>(base);
  REQUIRE(cuda::vm_map(0, a + kPage, 3 * kPage));  // pages 1, 2, 3
  const int64_t free1 = cuda::device_memory(0).free;
  CHECK(free0 - free1 >= int64_t(3 * kPage));
  std::vector<unsigned char> put(3 * kPage), got(3 * kPage);
  for (size_t i = 0; i < put.size(); ++i) put[i] = static_cast<unsigned char>(i * 7 + i / kPage);
  cuda::copy(reinterpret_cast<void*>(a + kPage), put.data(), put.size(), cuda::CopyKind::HostToDevice, 0);
  cuda::copy(got.data(), reinterpret_cast<void*>(a + kPage), got.size(), cuda::CopyKind::DeviceToHost, 0);
  CHECK(got == put);

  // Page 0 maps, page 1 is mapped already: the call fails, and unmaps and releases page 0 again.
  CHECK_THROWS_WITH_AS(cuda::vm_map(0, a, 2 * kPage), doctest::Contains("cuMemMap"), DeviceError);
  CHECK(about(cuda::device_memory(0).free, free1));
  std::fill(got.begin(), got.end(), 0);
  cuda::copy(got.data(), reinterpret_cast<void*>(a + kPage), got.size(), cuda::CopyKind::DeviceToHost, 0);
  CHECK(got == put);  // the pages mapped before are untouched

  cuda::vm_unmap(0, nullptr, a + kPage, 3 * kPage);
  cuda::vm_release(0, a, 8 * kPage);
  CHECK(about(cuda::device_memory(0).free, free0));
  void* p = nullptr;
  CHECK_NOTHROW(p = cuda::malloc(0, 512));  // no unmap or release failure waits to be raised
  CHECK(p != nullptr);
  cuda::free(0, p);
  CHECK(cuda::current_device() == device);
}

TEST_CASE("cuda expandable: a segment grows under live tensors, which keep their values; meta books the same") {
  using layout_check::MiB;
  {  // the kernels and copies below, once, so that loading their code is not counted as a page kept
    Tensor warm = empty({512}, TensorOptions(kUInt8).device(kGPU));
    warm.fill_(1);
    CHECK(equal(warm.to(kCPU), full({512}, 1.0, TensorOptions(kUInt8))));
  }
  Expandable on;
  const int64_t used_before = cuda::device_memory(0).used;
  std::vector<std::pair<int64_t, int64_t>> layouts[2];  // (reserved, allocated) after each step
  for (const Device& d : {kGPU, kMeta}) {
    CAPTURE(d);
    std::optional<MetaTargetGuard> target;
    if (d.is_meta()) target.emplace(DeviceType::CUDA);
    IsolatedAllocator fresh(d, 48 * MiB);
    std::mt19937 rng(11);
    std::vector<std::pair<Tensor, int>> live;  // each tensor filled with its own byte
    auto check_values = [&] {
      if (d.is_meta()) return;
      for (auto& [t, value] : live) {
        const Tensor want = full(t.shape(), double(value), TensorOptions(kUInt8));
        CHECK_MESSAGE(equal(t.to(kCPU), want), "a tensor of ", t.numel(), " bytes lost its value ", value);
      }
    };
    for (int i = 0; i < 300; ++i) {
      if (live.size() < 3 || rng() % 3 != 0) {
        const int64_t sizes[] = {512, 3000, 100 * 1024, MiB, 1536 * 1024, 3 * MiB, 7 * MiB + 4000};
        const int64_t n = sizes[rng() % 7];
        const int value = int(rng() % 251);
        try {
          Tensor t = empty({n}, TensorOptions(kUInt8).device(d));
          t.fill_(value);
          live.emplace_back(t, value);
        } catch (const OutOfMemoryError&) {
        }
      } else {
        live.erase(live.begin() + long(rng() % live.size()));
      }
      if (i % 61 == 0) empty_cache(d);  // unmaps free pages between live tensors too
      const MemoryStats s = memory_stats(d);
      layouts[d.is_meta()].emplace_back(s.reserved, s.allocated);
      if (i % 50 == 0) {
        check_values();
        layout_check::check_consistent(d);
      }
    }
    check_values();
    if (d.is_cuda()) {
      for (auto& seg : memory_segments(d)) CHECK(seg.expandable);
      CHECK(memory_stats(d).num_unmaps > 0);
      cuda::synchronize(0);
    }
    live.clear();
  }
  CHECK(layouts[0] == layouts[1]);  // meta predicts cuda: the same bytes after every step
  // Every page went back with the allocator (IsolatedAllocator's end): none is left mapped.
  CHECK(about(cuda::device_memory(0).used, used_before));
}
