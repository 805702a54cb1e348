// The floor a budget states (budget::Floor, planned on meta) against the smallest limit a step
// really trains under, found by bisection on the CPU: the stated floor is never above it, and at
// most one allocation below (with the cache off each allocation is its own segment). A GPT, an MLP
// and the ConvNet of examples/, small enough for a few dozen CPU runs each.
#include <doctest/doctest.h>

#include <algorithm>

#include <memgrad/memgrad.h>
#include <memgrad/plan/planner.h>

#include "../../examples/convnet.h"

using namespace mg;

namespace {

struct Mode {
  const char* name;
  budget::Remat remat;
  budget::Offload offload;
};
constexpr Mode kModes[] = {{"remat", budget::Remat::Dynamic, budget::Offload::None},
                           {"offload", budget::Remat::None, budget::Offload::Activations},
                           {"both", budget::Remat::Dynamic, budget::Offload::All}};

// Two steps (the second holds the optimizer state throughout) under the budget runtime with `limit`
// (0: none), on meta (a plan) or for real on the cpu.
plan::StepReport run(const plan::Program& p, const plan::StepContext& ctx, const Mode& m, int64_t limit, bool meta) {
  plan::PlanOptions o;
  o.steps = 2;
  o.memory_limit = limit;
  o.smallest_limit = false;
  budget::Options b;
  b.remat = m.remat, b.offload = m.offload;
  o.budget = b;
  if (meta) return plan::plan(p, ctx, o);
  plan::StepContext cpu = ctx;
  cpu.device = kCPU;
  return plan::measure(p, cpu, o);
}

void check_floor(const char* model, const plan::Program& p, const plan::StepContext& ctx) {
  for (const Mode& m : kModes) {
    CAPTURE(model);
    CAPTURE(m.name);
    const plan::StepReport planned = run(p, ctx, m, 0, true);
    REQUIRE_FALSE(planned.out_of_memory);
    const budget::Floor stated = planned.floors[m.remat == budget::Remat::Dynamic][int(m.offload)];
    // The largest allocation of the step: what "one segment" is with the cache off.
    const plan::StepReport unconstrained = run(p, ctx, {"none", budget::Remat::None, budget::Offload::None}, 0, false);
    int64_t segment = 0;
    for (const auto& [owner, bytes] : unconstrained.at_peak_by_owner) segment = std::max(segment, bytes);
    // Bisection on the cpu, and on meta: `lo` fails, `hi` trains.
    int64_t smallest[2] = {0, 0};
    for (bool meta : {false, true}) {
      int64_t lo = stated.bytes - plan::kGranule, hi = unconstrained.peak;
      CHECK(run(p, ctx, m, lo, meta).out_of_memory);  // the stated floor is not above the true one
      while (hi - lo > plan::kGranule) {
        const int64_t mid = lo + (hi - lo) / 2 / plan::kGranule * plan::kGranule;
        (run(p, ctx, m, mid, meta).out_of_memory ? lo : hi) = mid;
      }
      smallest[meta] = hi;
    }
    MESSAGE(std::string(model), " ", std::string(m.name), ": stated ", stated.bytes, " B, trains from ", smallest[0],
            " B (", stated.str(), ")");
    CHECK(stated.bytes <= smallest[0]);
    CHECK(smallest[0] - stated.bytes <= segment);
    CHECK_FALSE(stated.kernel.empty());
    CHECK_FALSE(stated.tensors.empty());
    // Meta makes the runtime's decisions as the cpu does (modeled costs); the cpu also holds the
    // loss the step reads with item(), which meta has no value for.
    CHECK(smallest[1] <= smallest[0]);
    CHECK(smallest[0] - smallest[1] <= plan::kGranule);
  }
}

}  // namespace

TEST_CASE("budget floor: stated on meta, at most one allocation below the smallest limit that trains") {
  nn::GPTConfig g;
  g.n_layer = 2, g.n_head = 2, g.n_embd = 64, g.vocab_size = 64, g.block_size = 32, g.dropout = 0.1;
  const train::InputShape gpt_input{4, 32};
  check_floor("gpt", plan::program(train::ModelSpec::gpt_model(g), gpt_input, {}), plan::context(gpt_input));
  const train::InputShape mlp_input{256, 1};
  check_floor("mlp", plan::program(train::ModelSpec::mlp(4, 64), mlp_input, {}), plan::context(mlp_input));
  plan::StepContext conv;
  conv.batch = 8;
  check_floor("convnet", convnet::program(8, 2, 8, {}), conv);
}
