// Out of memory in a real training step on cpu under a limit: the error, the state after it,
// and the batch-size finder. Caching is off here so that reserved == allocated and "fits" has an
// exact answer: the step fits when the bytes held before it plus its peak stay under the limit.
#include <doctest/doctest.h>

#include "mlp.h"

using namespace mg;

namespace {

// The peak a step of `batch` rows adds on top of what is held before it, measured on meta.
int64_t step_peak_on_meta(int64_t batch) {
  reset_peak(kMeta);
  int64_t before = memory_stats(kMeta).allocated;
  mlp::train_step(kMeta, batch);
  return memory_stats(kMeta).peak_allocated - before;
}

struct CpuUnderLimit {
  explicit CpuUnderLimit(int64_t step_bytes) {
    set_caching(kCPU, false);
    set_memory_limit(kCPU, memory_stats(kCPU).reserved + step_bytes);
  }
  ~CpuUnderLimit() {
    set_memory_limit(kCPU, 0);
    set_caching(kCPU, true);
  }
};

}  // namespace

TEST_CASE("oom: a step past the limit throws, leaks nothing, and a smaller batch then succeeds") {
  CpuUnderLimit limit(step_peak_on_meta(64));
  MemoryStats before = memory_stats(kCPU);
  auto owners_before = memory_by_owner(kCPU);
  std::string message;
  try {
    mlp::train_step(kCPU, 256);
  } catch (const OutOfMemoryError& e) {
    message = e.what();
  }
  REQUIRE_FALSE(message.empty());
  CHECK(message.find("out of memory on cpu") != std::string::npos);
  CHECK(message.find("Top owners:") != std::string::npos);
  MemoryStats after = memory_stats(kCPU);
  CHECK(after.num_ooms == before.num_ooms + 1);
  CHECK(after.allocated == before.allocated);
  CHECK(after.by_category == before.by_category);
  CHECK(after.reserved == before.reserved);
  CHECK(after.requested == before.requested);
  CHECK(memory_by_owner(kCPU) == owners_before);
  CHECK_NOTHROW(mlp::train_step(kCPU, 64));
  CHECK(memory_stats(kCPU).allocated == before.allocated);
}

TEST_CASE("oom: find_max_batch_size halves until a step fits, then finds the largest that fits") {
  // A limit that a batch of exactly 100 rows fits: the step's bytes grow by at least 1 KiB a row.
  const int64_t budget = step_peak_on_meta(100);
  REQUIRE(step_peak_on_meta(101) > budget);
  CpuUnderLimit limit(budget);
  int64_t ooms = memory_stats(kCPU).num_ooms;
  int64_t held = memory_stats(kCPU).allocated;

  BatchSizeResult r = find_max_batch_size([](int64_t b) { mlp::train_step(kCPU, b); }, 512, kCPU);
  CHECK(r.batch_size == 100);
  CHECK(r.peak_allocated == held + budget);
  // 512, 256, 128 fail, 64 fits; then bisection between 64 and 128.
  std::vector<std::pair<int64_t, bool>> expect{{512, false}, {256, false}, {128, false}, {64, true},   {96, true},
                                               {112, false}, {104, false}, {100, true},  {102, false}, {101, false}};
  REQUIRE(r.attempts.size() == expect.size());
  int failures = 0;
  for (size_t i = 0; i < expect.size(); ++i) {
    CHECK(r.attempts[i].batch_size == expect[i].first);
    CHECK(r.attempts[i].fits == expect[i].second);
    failures += !expect[i].second;
  }
  CHECK(memory_stats(kCPU).num_ooms == ooms + failures);
  CHECK(memory_stats(kCPU).allocated == held);
  // The answer checked directly: 100 fits, 101 does not.
  CHECK_NOTHROW(mlp::train_step(kCPU, 100));
  CHECK_THROWS_AS(mlp::train_step(kCPU, 101), OutOfMemoryError);

  BatchSizeResult coarse = find_max_batch_size([](int64_t b) { mlp::train_step(kCPU, b); }, 512, kCPU, false);
  CHECK(coarse.batch_size == 64);
  CHECK(coarse.attempts.size() == 4);
  CHECK_THROWS_AS(find_max_batch_size([](int64_t) {}, 0), ValueError);
}

TEST_CASE("oom: the batch-size finder plans on the meta device without touching bytes") {
  const int64_t budget = step_peak_on_meta(40);
  set_caching(kMeta, false);
  set_memory_limit(kMeta, memory_stats(kMeta).reserved + budget);
  BatchSizeResult r = find_max_batch_size([](int64_t b) { mlp::train_step(kMeta, b); }, 1000, kMeta);
  set_memory_limit(kMeta, 0);
  set_caching(kMeta, true);
  CHECK(r.batch_size == 40);
  BatchSizeResult none = find_max_batch_size([](int64_t) { throw OutOfMemoryError("never fits"); }, 4, kMeta);
  CHECK(none.batch_size == 0);
  CHECK(none.attempts.size() == 3);  // 4, 2, 1
}
