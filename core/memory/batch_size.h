// The batch-size finder people write by hand: try a training step, halve the batch on
// OutOfMemoryError until one fits, then search between the largest fit and the smallest
// failure for the largest batch that fits. Set a limit (set_memory_limit) to plan for a
// smaller device, or run the step on the meta device with a limit to plan without bytes.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <memgrad/core/device.h>

namespace mg {

struct BatchSizeAttempt {
  int64_t batch_size = 0;
  bool fits = false;
  int64_t peak_allocated = 0;  // peak of the attempt on the device (up to the failure when it did not fit)
};

struct BatchSizeResult {
  int64_t batch_size = 0;                  // the largest that fits; 0 when not even 1 fits
  int64_t peak_allocated = 0;              // that batch's peak
  std::vector<BatchSizeAttempt> attempts;  // in the order they ran
};

// Runs `step(batch_size)` (a whole training step: forward, backward, optimizer) for batch sizes
// from `max_batch` down, treating an OutOfMemoryError on `device` as "does not fit". Everything the
// failed step allocated is freed by unwinding, so the program goes on. With `refine` off it stops
// at the first halving that fits (a power-of-two fraction of max_batch).
BatchSizeResult find_max_batch_size(const std::function<void(int64_t)>& step, int64_t max_batch,
                                    const Device& device = kCPU, bool refine = true);

}  // namespace mg
