// The largest batch whose steps run on meta under a memory limit.
#pragma once
#include <cstdint>
#include <functional>

#include <memgrad/plan/model.h>

namespace mg::plan {

// A k in [1, max_k] with fits(k) while fits(k + 1) is false or k == max_k (doubling, then bisection);
// 0 if fits(1) is false. The largest such k when fits is monotone.
int64_t largest_fitting(int64_t max_k, const std::function<bool(int64_t)>& fits);

// A batch whose steps run on meta under a memory limit of `budget`, to the steady state, while
// batch + 1's do not (doubling, then bisection); 0 if batch 1 does not. It is the largest when the
// peak grows with the batch; segment rounding can break that, so a larger batch may fit after a gap
// the search does not look past. ctx.batch is ignored.
int64_t largest_batch(const Program& program, const StepContext& ctx, int64_t budget, const PlanOptions& options = {},
                      int64_t max_batch = int64_t(1) << 20);
int64_t largest_batch(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                      const train::Policy& policy, int64_t budget, const PlanOptions& options = {},
                      int64_t max_batch = int64_t(1) << 20);

}  // namespace mg::plan
