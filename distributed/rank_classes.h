// Classes of ranks: the ranks of a data-parallel run whose shares of the parameters have the same
// sizes. A rank's share is its slice of each parameter (ZeRO stages 1-2: parameter j of n elements
// in slices of c = ceil(n / N), possibly empty) or its piece of each parameter inside its chunk of
// the parameter's unit (stage 3: units padded to a multiple of N). Two ranks whose non-empty slices
// or pieces have the same lengths in the same order allocate the same bytes in the same order (the
// optimizer's state, the float32 masters, the clipping's temporaries are made per slice; everything
// else is the same on every rank), so they have the same plan: a planner plans each class once, at
// any world size (2^20 ranks make a few dozen classes, not 2^20 plans). The arithmetic is
// DataParallel's and ParameterUnits' (a test holds them together).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mg::distributed {

struct RankClass {
  std::vector<std::pair<int64_t, int64_t>> ranks;  // [first, last] intervals, ascending
  int64_t count = 0;                               // ranks in the class
  std::vector<int64_t> lengths;                    // the non-empty slices' or pieces' lengths, in parameter order
  int64_t first() const { return ranks.front().first; }
  bool contains(int64_t rank) const;
  std::string str() const;  // "0-6, 8, 10-63"
};

// The classes of `world` ranks at ZeRO `stage` (0-3; 3 also for parameter offload) for parameters of
// `numel` elements, in the order DataParallel is given them; at stage 3 `unit[j]` is parameter j's
// unit (any labels: the units' order does not matter, each parameter's place in its unit does). In
// order of their first rank, so rank 0's class comes first. ValueError for world < 1 or a stage
// outside 0-3.
std::vector<RankClass> rank_classes(const std::vector<int64_t>& numel, const std::vector<size_t>& unit, int stage,
                                    int64_t world);

}  // namespace mg::distributed
