// Checkpoint policies over a chain of blocks: which blocks run as recompute-on-backward segments
// (Policy: none, sqrt(n), selective, every-K, or any segments), the chain a program runs its blocks
// through (Chain, chain_of) and run_chain, which runs it under a policy.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <memgrad/core/tensor.h>
#include <memgrad/nn/layers.h>

namespace mg::train {

struct Segment {
  int64_t begin = 0, end = 0;  // blocks [begin, end) run as one recompute-on-backward segment
};

// Which blocks of a chain run as checkpoint segments; blocks in no segment keep their activations.
// `selective` (blocks in no segment): each block checkpoints only its recompute-cheap part (the
// GPT's attention core, as Korthikanti et al. 2022; any other block runs as a segment with
// CheckpointPolicy::keep_matmuls).
struct Policy {
  std::string name = "none";
  std::vector<Segment> segments;
  bool selective = false;

  static Policy none();
  static Policy every_block(int64_t n);
  static Policy uniform(int64_t n, int64_t k);  // k segments of near-equal length, all checkpointed
  static Policy sqrt_n(int64_t n);              // uniform(n, round(sqrt(n)))
  static Policy selective_only();
  // By name, over n blocks: none, sqrt, selective, or every-K (segments of K blocks, 1 <= K <= n), as
  // memgrad train|plan --checkpoint takes them (its "auto" is plan::choose_segments). ValueError otherwise.
  static Policy parse(const std::string& name, int64_t n);
  int64_t recomputed_blocks() const;
  std::string str() const;  // "[0,4) [4,8)" or "-"
};

// n blocks run in order. block(i, x, selective) runs block i on x; with `selective`, only its
// recompute-cheap part is checkpointed.
struct Chain {
  int64_t n = 0;
  std::function<Tensor(int64_t, const Tensor&, bool)> block;
};
// n blocks where forward(i, x) runs block i, each under MemoryScope("<i>") (its activations carry the
// block's index as owner); `selective` runs a block as a checkpoint that keeps what its matmuls
// saved. The Sequential and ModuleList forms refer to `blocks`: keep them alive while the chain runs.
Chain chain_of(int64_t n, std::function<Tensor(int64_t, const Tensor&)> forward);
Chain chain_of(const nn::Sequential& blocks);
template <class M>
Chain chain_of(const nn::ModuleList<M>& blocks) {
  const nn::ModuleList<M>* list = &blocks;
  return chain_of(int64_t(blocks.size()), [list](int64_t i, const Tensor& x) { return (*list)[size_t(i)].forward(x); });
}
// Runs x through the chain as `policy` says: each segment as one checkpoint (its blocks' activations
// recomputed in backward), the other blocks kept. Raises ValueError for segments outside the chain.
// While a ChainRunner is installed on this thread it runs the chain its own way instead.
Tensor run_chain(const Chain& chain, const Tensor& x, const Policy& policy);

// Another way to run every chain on this thread, installed from above (the planner's probe, which
// measures block costs: plan::measure_block_costs). Construction installs it, destruction puts the
// previous one back.
class ChainRunner {
 public:
  ChainRunner();
  virtual ~ChainRunner();
  ChainRunner(const ChainRunner&) = delete;
  ChainRunner& operator=(const ChainRunner&) = delete;
  virtual Tensor run(const Chain& chain, const Tensor& x) = 0;

 private:
  ChainRunner* previous_;
};

}  // namespace mg::train
