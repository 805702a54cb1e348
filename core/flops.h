// Counts the floating-point operations of the matrix ops (matmul, linear, conv2d: 2 per
// multiply-add), which dominate training cost. Works on every device, meta included, so a
// planned step reports its cost without running it.
#pragma once

namespace mg {

class FlopCounter {
 public:
  FlopCounter();  // counts from now on, on this thread, until destroyed (counters nest)
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  double total() const { return total_; }
  // The part spent recomputing checkpoint segments during backward.
  double recompute() const { return recompute_; }

 private:
  friend void count_flops(double);
  double total_ = 0, recompute_ = 0;
  FlopCounter* outer_;
};

// Called by ops: adds `flops` to every active counter on this thread.
void count_flops(double flops);

// Marks work done while recomputing a checkpoint segment.
class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();

 private:
  bool prev_;
};

}  // namespace mg
