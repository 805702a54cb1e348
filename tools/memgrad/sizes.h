// Sizes from flags multiplied without overflow: every product of flag values the command forms
// (tokens per step, a tensor's bytes, the parameters' bytes) goes through checked_product, and one
// that no int64 can count, or no device can hold, is a usage error naming each flag in it, instead of
// a wrapped number or a plan of 0 bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "options.h"

namespace memgrad_cli {

struct Factor {
  std::string name;  // a flag ("--batch"), what the value is ("bytes per float32"), or ""
  int64_t value;
};

// The product of `factors`; UsageError "<what>: --batch 1000000000 x --seq 1024 x ... is more than
// <limit's words>" when it passes `limit` (int64's largest by default).
int64_t checked_product(const std::vector<Factor>& factors, const std::string& what, int64_t limit = INT64_MAX);

// The sizes of the model and step the flags describe (s.world_size processes of s.accum micro-batches):
// tokens per step, each large tensor (a weight, the logits, the attention scores, a block's
// activations) against the largest request any device takes (mg::memory::kMaxRequest, 2^57 B), and the sum
// of parameters and activations against int64. UsageError naming the flags of the first that fails.
void check_sizes(const mg::train::ModelSpec& spec, const StepFlags& s);

}  // namespace memgrad_cli
