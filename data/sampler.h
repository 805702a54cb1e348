// Samplers: the order in which a DataLoader visits a dataset's examples, epoch after epoch. Unlike
// libtorch's, whose samplers are iterators with a position, these are pure functions of (epoch,
// position): the loader keeps the position (DataLoader::position), so resuming is setting it back,
// and any number of workers or processes agree on the order without sharing anything. Neither holds
// memory that grows with the dataset: the shuffled order of 10^12 examples costs nothing.
#pragma once
#include <cstdint>

namespace mg::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  int64_t size() const { return size_; }
  // The example visited at `position` (0 <= position < size()) of epoch `epoch` (>= 0); each
  // epoch visits every example once. IndexError outside those ranges.
  int64_t index(int64_t epoch, int64_t position) const;

 protected:
  explicit Sampler(int64_t size);  // ValueError unless size >= 1
  virtual int64_t index_unchecked(int64_t epoch, int64_t position) const = 0;

 private:
  int64_t size_;
};

// 0, 1, 2, ... in every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size) : Sampler(size) {}

 protected:
  int64_t index_unchecked(int64_t, int64_t position) const override { return position; }
};

// A pseudorandom permutation per epoch, drawn from (seed, epoch) alone: a Feistel network keyed by
// them over the smallest power of 4 that holds size() positions, walked until it lands below size()
// (Black and Rogaway's cycle walking; under 4 steps on average).
class ShuffledSampler : public Sampler {
 public:
  ShuffledSampler(int64_t size, uint64_t seed);
  uint64_t seed() const { return seed_; }

 protected:
  int64_t index_unchecked(int64_t epoch, int64_t position) const override;

 private:
  uint64_t seed_;
  int half_bits_ = 0;  // the network permutes 2 * half_bits_ bits
};

}  // namespace mg::data
