// Plans timed by the cost model (plan/timed.h, plan/mixed.h): the fitted model against the kernels it was fitted
// on, the mixed plan against the recompute-only ones, and the plan against its run on the cpu.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>
#include <memgrad/plan/planner.h>

using namespace mg;

namespace {

nn::GPTConfig small_gpt() {
  nn::GPTConfig g;
  g.n_layer = 3, g.n_head = 2, g.n_embd = 64, g.vocab_size = 64, g.block_size = 32, g.dropout = 0.1;
  return g;
}

}  // namespace

TEST_CASE("mixed plans: the fitted cost model prices the kernels it was fitted on at their measured time") {
  const train::InputShape in{16, 32};
  const plan::Program p = plan::program(train::ModelSpec::gpt_model(small_gpt()), in, {});
  plan::StepContext cpu = plan::context(in);
  cpu.device = kCPU;
  plan::PlanOptions o;
  o.steps = 2, o.smallest_limit = false;
  budget::Options watch;
  watch.remat = budget::Remat::None;
  o.budget = watch;
  const plan::StepReport ran = plan::measure(p, cpu, o);
  REQUIRE(ran.budget.kernels > 0);
  // Least squares with a per-kernel term: the fitted times of the kernels add up to their measured
  // sum. A meta run of the same steps under the fitted model runs the same kernels and predicts it.
  const budget::CostModel m = budget::fit_cost_model(kCPU, 0);
  CHECK(m.flops_per_second > 0);
  CHECK(m.bytes_per_second > 0);
  watch.model = m;
  o.budget = watch;
  const plan::StepReport planned = plan::plan(p, plan::context(in), o);
  CHECK(planned.budget.kernels == ran.budget.kernels);
  CHECK(planned.budget.modeled_seconds == doctest::Approx(ran.budget.kernel_seconds).epsilon(1e-6));
  // plan::fit_cost_model fits on steady steps of its own.
  const budget::CostModel steady = plan::fit_cost_model(p, cpu);
  CHECK(steady.flops_per_second > 0);
  CHECK(steady.seconds_per_kernel > 0);  // dispatch and autograd between kernels take time
  // Its host copies timed on the program's own offloads (a step under 80% of its peak).
  CHECK(std::isfinite(steady.host_bytes_per_second));
  CHECK(steady.host_bytes_per_second > 0);
  // On meta there are no times to fit.
  CHECK(budget::fit_cost_model(kMeta, 0).flops_per_second == budget::CostModel::fixed().flops_per_second);
}

TEST_CASE("mixed plans: the fit times host copies on the program's own offloads, and says each step it runs") {
  // Parameters and AdamW state are most of this step's peak (a wide vocabulary, 8 tokens): 80% of the
  // peak, the limit the host copies were once timed under, is below what offloading activations can
  // reach, so that step ran out of memory and the copies kept the probe's rate.
  nn::GPTConfig g = small_gpt();
  g.n_layer = 1, g.vocab_size = 4096, g.dropout = 0;
  const train::InputShape in{1, 8};
  const plan::Program p = plan::program(train::ModelSpec::gpt_model(g), in, {});
  plan::StepContext cpu = plan::context(in);
  cpu.device = kCPU;
  plan::PlanOptions o;
  std::vector<std::string> said;
  o.progress = [&said](const std::string& what) { said.push_back(what); };
  const budget::CostModel m = plan::fit_cost_model(p, cpu, o);
  const double probe = budget::stats(kCPU).bandwidth;  // 4 MiB out and back, measured once
  REQUIRE(probe > 0);
  CHECK(std::isfinite(m.host_bytes_per_second));
  CHECK(m.host_bytes_per_second != probe);
  // Building the program, then 2 steps to the steady state and 3 timed, then 2 with activations
  // offloaded, counted on their own: they run only where offloading has room (once said as steps 6
  // and 7 of 7, so a fit that skipped them ended on "step 5 of 7").
  REQUIRE(said.size() == 8);
  CHECK(said.front() == "fitting the cost model: building the program on the cpu");
  CHECK(said[1] == "fitting the cost model: step 1 of 5 on the cpu");
  CHECK(said[5] == "fitting the cost model: step 5 of 5 on the cpu");
  CHECK(said[6] == "fitting the cost model: host copies, step 1 of 2 on the cpu");
  CHECK(said.back() == "fitting the cost model: host copies, step 2 of 2 on the cpu");
}

TEST_CASE("mixed plans: never slower than the best recompute-only plan, under the budget to the byte, as run") {
  const train::InputShape in{16, 32};
  const plan::Program p = plan::program(train::ModelSpec::gpt_model(small_gpt()), in, {});
  const plan::StepContext ctx = plan::context(in);
  budget::CostModel m;  // offload priced dearly enough that recompute wins sometimes, not always
  m.host_bytes_per_second = 4e9;
  budget::Options keep;
  keep.remat = budget::Remat::None, keep.model = m;
  const plan::TimedPlan none = plan::time_plan(p, ctx, "none", train::Policy::none(), keep, 0);
  REQUIRE(none.fits());
  for (double share : {0.8, 0.6, 0.45}) {
    const int64_t budget = int64_t(share * double(none.peak())) / plan::kGranule * plan::kGranule;
    CAPTURE(share);
    const std::vector<plan::TimedPlan> candidates = plan::mixed_candidates(p, ctx, budget, m);
    REQUIRE(candidates.size() >= 8);
    const plan::TimedPlan dp = plan::best_recompute(candidates);
    plan::TimedPlan mixed = plan::best_mixed(candidates);
    REQUIRE(mixed.fits());
    for (const plan::TimedPlan& c : candidates) {
      CHECK(c.budget == budget);
      if (c.fits()) CHECK(c.peak() <= budget);
      if (c.fits()) CHECK(mixed.predicted <= c.predicted);
    }
    if (dp.fits()) CHECK(mixed.predicted <= dp.predicted);
    CHECK(mixed.peak() <= budget);
    // The same plan on the cpu: it fits, and the runtime recomputes and offloads what the plan did.
    plan::StepContext cpu = ctx;
    cpu.device = kCPU;
    const plan::StepReport ran = plan::measure_plan(p, cpu, mixed);
    REQUIRE_FALSE(ran.out_of_memory);
    CHECK(mixed.measured > 0);
    CHECK(ran.budget.offloads == mixed.planned.budget.offloads);
    CHECK(ran.budget.rematerializations == mixed.planned.budget.rematerializations);
    CHECK(ran.budget.evictions == mixed.planned.budget.evictions);
  }
  // Below every plan's need: no plan, and the reason in the method.
  const plan::TimedPlan nothing = plan::choose_mixed(p, ctx, 64 * 1024, m);
  CHECK_FALSE(nothing.fits());
  CHECK(nothing.method == "none fits");
}

TEST_CASE("mixed plans: the curve has every method, and draws each point") {
  const train::InputShape in{16, 32};
  const plan::Program p = plan::program(train::ModelSpec::gpt_model(small_gpt()), in, {});
  const plan::StepContext ctx = plan::context(in);
  budget::Options keep;
  keep.remat = budget::Remat::None;
  const int64_t peak = plan::time_plan(p, ctx, "none", train::Policy::none(), keep, 0).peak();
  const std::vector<plan::TimedPlan> points =
      plan::pareto(p, ctx, {peak * 7 / 10 / plan::kGranule * plan::kGranule}, budget::CostModel::fixed());
  std::map<std::string, int> by_method;
  for (const plan::TimedPlan& t : points) {
    CHECK(t.fits());
    CHECK(t.predicted > 0);
    ++by_method[t.method];
  }
  for (const char* method : {"none", "sqrt(n)", "selective", "every block", "DP", "mixed", "dynamic"})
    CHECK(by_method[method] == 1);
  // Checkpointing every block recomputes the most: slowest of the unconstrained ones, and least memory.
  auto find = [&](const std::string& method) {
    return *std::find_if(points.begin(), points.end(), [&](const plan::TimedPlan& t) { return t.method == method; });
  };
  CHECK(find("every block").predicted > find("none").predicted);
  CHECK(find("every block").peak() < find("none").peak());
  const std::string svg = plan::pareto_svg(points, "t");
  size_t circles = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++circles;
  CHECK(circles == points.size() + by_method.size() + 2);  // each point, each method's legend, the two keys
}
