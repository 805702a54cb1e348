// Counter-based randomness: a random op draws the numbers at counters [offset, offset + n) of
// the generator's seed and advances the offset, so the same seed gives the same numbers on
// every device and in any thread split, and a recomputation can replay an op exactly.
#pragma once
#include <cstdint>

namespace mg {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x853c49e6748fea9bULL) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void manual_seed(uint64_t seed) { seed_ = seed, offset_ = 0; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  // Reserves `n` counters and returns the first; offsets stay multiples of 4 (one Philox block).
  uint64_t reserve(uint64_t n) {
    uint64_t first = offset_;
    offset_ += (n + 3) / 4 * 4;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator.
Generator& default_generator();
// Resets the default generator to `seed` at offset 0.
void manual_seed(uint64_t seed);

// Restores the default generator's seed and offset when it goes out of scope.
class GeneratorStateGuard {
 public:
  GeneratorStateGuard() : seed_(default_generator().seed()), offset_(default_generator().offset()) {}
  ~GeneratorStateGuard() {
    default_generator().manual_seed(seed_);
    default_generator().set_offset(offset_);
  }

 private:
  uint64_t seed_, offset_;
};

}  // namespace mg
