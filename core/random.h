// Counter-based randomness: a random op draws the numbers at counters [offset, offset + n) of
// the generator's seed and advances the offset, so the same seed gives the same numbers on
// every device and in any thread split, and a recomputation can replay an op exactly.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

namespace mg {

// A seed and a counter offset. Thread-safe: threads drawing at once never share counters.
class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 0x853c49e6748fea9bULL;
  // What one random op uses: counters [offset, offset + n) of generator `seed`.
  struct Draw {
    uint64_t seed, offset;
  };

  explicit Generator(uint64_t seed = kDefaultSeed) : seed_(seed) {}
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  uint64_t seed() const;
  uint64_t offset() const;
  void manual_seed(uint64_t seed);  // and offset 0
  void set_offset(uint64_t offset);
  // Reserves `n` counters, rounded up to whole Philox blocks of 4 (offsets stay multiples of 4),
  // and returns them with the seed. While a DrawLog replays on this thread, returns its next
  // recorded draw instead and leaves the generator alone.
  Draw draw(uint64_t n);

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The generator random ops use when given none. Process-wide (one for all threads), like
// PyTorch's default CPU generator; a program that wants independent streams per thread passes
// its own Generator to the random ops.
Generator& default_generator();
// Resets the default generator to `seed` at offset 0.
void manual_seed(uint64_t seed);
// `g`, or the default generator when null.
inline Generator& generator_or_default(Generator* g) { return g ? *g : default_generator(); }

// The draws that random ops made on this thread while a Recording was alive (from any generator),
// and their replay: checkpoint segments record their first run's draws and replay them when they
// recompute, so dropout masks come out identical whichever generators the segment used.
struct DrawLog {
  std::vector<Generator::Draw> draws;
  std::vector<uint64_t> sizes;  // counters asked for, checked on replay

  // Appends every draw on this thread to `log` until destroyed (recordings nest: each active
  // one records).
  class Recording {
   public:
    explicit Recording(DrawLog& log);
    ~Recording();
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;
  };
  // Serves this thread's draws from `log`, in order, until destroyed; a draw of another size, or
  // one past the end, raises AutogradError (the replayed code did not repeat the recorded run).
  class Replay {
   public:
    explicit Replay(const DrawLog& log);
    ~Replay();
    Replay(const Replay&) = delete;
    Replay& operator=(const Replay&) = delete;

   private:
    const DrawLog* prev_;
    size_t prev_next_;
  };
};

// Restores the default generator's seed and offset when it goes out of scope.
class GeneratorStateGuard {
 public:
  GeneratorStateGuard() : seed_(default_generator().seed()), offset_(default_generator().offset()) {}
  ~GeneratorStateGuard() {
    default_generator().manual_seed(seed_);
    default_generator().set_offset(offset_);
  }
  GeneratorStateGuard(const GeneratorStateGuard&) = delete;
  GeneratorStateGuard& operator=(const GeneratorStateGuard&) = delete;

 private:
  uint64_t seed_, offset_;
};

}  // namespace mg
