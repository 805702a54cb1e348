#include <memgrad/core/memory/batch_size.h>

#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>

namespace mg {

BatchSizeResult find_max_batch_size(const std::function<void(int64_t)>& step, int64_t max_batch, const Device& device,
                                    bool refine) {
  MG_CHECK(max_batch >= 1, ValueError, "find_max_batch_size: expected a max_batch of at least 1, got ", max_batch);
  BatchSizeResult r;
  auto attempt = [&](int64_t b) {
    reset_peak(device);
    bool fits = true;
    try {
      step(b);
    } catch (const OutOfMemoryError&) {
      fits = false;
    }
    r.attempts.push_back({b, fits, memory_stats(device).peak_allocated});
    if (fits && b > r.batch_size) r.batch_size = b, r.peak_allocated = r.attempts.back().peak_allocated;
    return fits;
  };
  int64_t fail = 0;  // smallest batch known not to fit (0: none)
  int64_t b = max_batch;
  while (b >= 1 && !attempt(b)) fail = b, b /= 2;
  if (b < 1 || !refine || fail == 0) return r;
  int64_t lo = b, hi = fail;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (attempt(mid))
      lo = mid;
    else
      hi = mid;
  }
  return r;
}

}  // namespace mg
