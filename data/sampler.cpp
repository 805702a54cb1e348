#include <memgrad/data/sampler.h>

#include <memgrad/core/error.h>

namespace mg::data {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64's finalizer: every input bit flips about half the output bits
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// Luby and Rackoff's four rounds make a strong permutation as the halves grow, but on the few bits of a
// small dataset's halves they leave plain biases (example 0 at position 0 of 10 twice too often over
// 20,000 epochs); with eight every (example, position) count is within 3 standard deviations.
constexpr int kRounds = 8;
}  // namespace

Sampler::Sampler(int64_t size) : size_(size) {
  MG_CHECK(size >= 1, ValueError, "Sampler: expected at least one example, got ", size);
}

int64_t Sampler::index(int64_t epoch, int64_t position) const {
  MG_CHECK(epoch >= 0 && position >= 0 && position < size_, IndexError, "Sampler::index: position ", position,
           " of epoch ", epoch, ", expected a position in [0, ", size_, ") and an epoch >= 0");
  return index_unchecked(epoch, position);
}

ShuffledSampler::ShuffledSampler(int64_t size, uint64_t seed) : Sampler(size), seed_(seed) {
  while ((uint64_t(1) << (2 * half_bits_)) < uint64_t(size)) ++half_bits_;
}

int64_t ShuffledSampler::index_unchecked(int64_t epoch, int64_t position) const {
  if (half_bits_ == 0) return 0;
  const uint64_t mask = (uint64_t(1) << half_bits_) - 1;
  uint64_t keys[kRounds];
  for (int r = 0; r < kRounds; ++r) keys[r] = mix(seed_ ^ mix(uint64_t(epoch) * kRounds + uint64_t(r) + 1));
  uint64_t x = uint64_t(position);
  do {  // a permutation of [0, 4^half_bits): applied again until it lands in [0, size), a permutation of that
    uint64_t left = x >> half_bits_, right = x & mask;
    for (uint64_t key : keys) {
      const uint64_t next = left ^ (mix(right ^ key) & mask);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= uint64_t(size()));
  return int64_t(x);
}

}  // namespace mg::data
