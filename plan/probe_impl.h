// Private to plan/: how measure_block_costs watches a chain. While a probe lives on this thread (a
// train::ChainRunner), run_chain runs the chain the probe's way (every block kept, or all of them in one segment) and
// marks the peak allocated bytes of each phase (a block's forward, recompute and backward).
#pragma once
#include <memgrad/plan/planner.h>

namespace mg::plan::detail {

// Phase peaks of one instrumented step, the largest over its micro-batches. A mark closes a phase:
// it records the peak since the previous mark and starts a new one. Marks sit at the chain's entry,
// after each block's forward (and recompute), and in gradient hooks on each block's output and on
// the chain's input, which run just before that block's backward and just after block 0's.
struct Phases {
  int64_t n = 0;
  int64_t head = 0, tail = 0, rest = 0;  // head forward; tail forward + backward; head backward + step
  std::vector<int64_t> forward, backward, recompute;
  int64_t block_bytes = 0;   // allocated bytes added by one kept block's forward (its saved tensors + output)
  int64_t input_bytes = 0;   // the chain's input, rounded
  int64_t output_bytes = 0;  // a block's output, rounded
  double forward_flops = 0;  // block 0's forward
  bool backward0_hooked = false;
};

class ChainProbe : public train::ChainRunner {
 public:
  explicit ChainProbe(bool one_segment) : one_segment_(one_segment) {}
  Tensor run(const train::Chain& chain, const Tensor& x) override;
  int64_t mark();  // allocated peak on this thread's meta allocator since the last mark
  void close(int64_t& phase) { phase = std::max(phase, mark()); }
  Phases phases;

 private:
  void close_before(Tensor& out, int64_t i);
  bool one_segment_;
};

}  // namespace mg::plan::detail
