// The DataLoader on cuda: with pin_memory (page-locked host buffers, copies on a side stream into
// two staging buffers) and without, with and without workers, the batches are the cpu loader's,
// in order, over epochs; its buffers are where the ledger and cuda::pinned_bytes say.
#include <numeric>

#include "gpu_util.h"

using namespace gpu_test;

namespace {
std::shared_ptr<const data::TokenWindows> counting(int64_t n, int64_t length) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  return std::make_shared<data::TokenWindows>(data::Tokens::from_ids(ids, n, "counting"), length);
}
}  // namespace

TEST_CASE("cuda: the data loader's batches on the device equal the cpu loader's, pinned or not") {
  auto w = counting(3000, 33);
  auto shuffled = std::make_shared<data::ShuffledSampler>(w->size(), 4);
  const data::DataLoaderOptions cpu_options = data::DataLoaderOptions(24);  // the last batch of an epoch is short
  for (bool pin : {false, true})
    for (int64_t workers : {0, 1, 3}) {
      INFO("pin_memory " << pin << ", " << workers << " workers");
      data::DataLoader reference(w, shuffled, cpu_options);
      data::DataLoaderOptions o = data::DataLoaderOptions(cpu_options).device(kGPU).num_workers(workers);
      const int64_t allocated_before = memory_stats(kGPU).allocated, pinned_before = cuda::pinned_bytes();
      {
        data::DataLoader loader(w, shuffled, o.pin_memory(pin));
        const data::BufferBytes held = loader.bytes();
        CHECK(held.staging == (pin ? 2 * 2 * 6656 : 0));  // [24, 33] int64: 6336 B, 6656 in the ledger
        CHECK(cuda::pinned_bytes() - pinned_before == held.pinned);
        CHECK(memory_stats(kGPU).allocated - allocated_before == held.staging);
        for (int64_t i = 0; i < 2 * loader.batches_per_epoch() + 5; ++i) {
          const std::optional<data::Batch> want = reference.next(), got = loader.next();
          REQUIRE(want.has_value() == got.has_value());
          if (!want) continue;
          CHECK(got->indices == want->indices);
          CHECK(got->data.device() == kGPU);
          expect_equal(got->data, want->data, "data");
          expect_equal(got->target, want->target, "target");
        }
      }
      CHECK(cuda::pinned_bytes() == pinned_before);
      CHECK(memory_stats(kGPU).allocated == allocated_before);
    }
}
