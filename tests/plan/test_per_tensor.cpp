// Per-tensor plans (plan/per_tensor.h): the ILP's optimum against every one of the 3^k choices, on
// random problems and on a real step's largest saved tensors; the plan run on meta under the budget
// to the byte, and on the cpu doing the same offloads and recomputes with the same losses, bitwise.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include <memgrad/memgrad.h>
#include <memgrad/plan/per_tensor.h>
#include <memgrad/plan/planner.h>

using namespace mg;
using plan::Choice;

namespace {

nn::GPTConfig small_gpt() {
  nn::GPTConfig g;
  g.n_layer = 3, g.n_head = 2, g.n_embd = 64, g.vocab_size = 64, g.block_size = 32, g.dropout = 0.1;
  return g;
}

// The built-in GPT's program (plan::program), which also keeps each cpu step's loss.
plan::Program recording(const train::InputShape& input, std::shared_ptr<std::vector<double>> losses) {
  const train::ModelSpec spec = train::ModelSpec::gpt_model(small_gpt());
  return [=](const plan::StepContext& ctx) -> plan::Step {
    auto chain = std::make_shared<train::ChainModel>(spec, ctx.device);
    auto trainer = std::make_shared<train::Trainer>(chain->module(), train::StepOptions{});
    train::InputShape shape = input;
    shape.batch = ctx.batch;
    const bool meta = ctx.device.is_meta();
    const train::Policy policy = ctx.policy;
    return [=] {
      const double loss = train::train_step(
          *chain, *trainer, [&](int64_t) { return chain->zero_inputs(shape); }, policy);
      if (!meta) losses->push_back(loss);
    };
  };
}

// A random problem of k storages over `windows` kernels: intervals, bytes, prices, some storages that
// cannot be recomputed, recomputes that need others, and extra bytes while recomputing.
plan::TensorProblem random_problem(std::mt19937& rng, size_t k, int64_t windows) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  plan::TensorProblem p;
  for (int64_t t = 0; t < windows; ++t) p.base.push_back(pick(20, 60) * plan::kGranule);
  p.step_seconds = 1e-3;
  for (size_t i = 0; i < k; ++i) {
    plan::SavedStorage s;
    s.birth = int64_t(i);
    s.kernel = "k";
    s.bytes = pick(1, 16) * plan::kGranule;
    s.leave_after = pick(0, windows - 3);
    s.back_at = pick(s.leave_after + 2, windows - 1);
    s.offload_seconds = double(pick(1, 100)) * 1e-6;
    s.recompute_seconds = pick(0, 3) == 0 ? -1 : double(pick(1, 100)) * 1e-6;
    s.recompute_bytes = pick(0, 2) == 0 ? pick(1, 4) * plan::kGranule : 0;
    for (size_t u = 0; u < i; ++u)
      if (pick(0, 3) == 0) s.needs.push_back(u);
    p.storages.push_back(s);
  }
  return p;
}

// The same problem with only the storages `keep` (needs among them renumbered).
plan::TensorProblem subset(const plan::TensorProblem& p, const std::vector<size_t>& keep) {
  plan::TensorProblem q;
  q.base = p.base, q.step_seconds = p.step_seconds;
  for (size_t i : keep) {
    plan::SavedStorage s = p.storages[i];
    s.needs.clear();
    for (size_t u : p.storages[i].needs)
      if (auto at = std::find(keep.begin(), keep.end(), u); at != keep.end())
        s.needs.push_back(size_t(at - keep.begin()));
    q.storages.push_back(s);
  }
  return q;
}

// The ILP and the brute force agree on whether `budget` can be met and on the fastest time; the
// ILP's choices meet it in the model.
void check_optimum(const plan::TensorProblem& p, int64_t budget) {
  const plan::TensorPlan ilp = plan::solve_ilp(p, budget, 0), all = plan::brute_force(p, budget);
  CAPTURE(budget);
  REQUIRE(ilp.feasible == all.feasible);
  CHECK(ilp.optimal);
  if (!all.feasible) return;
  CHECK(ilp.seconds == doctest::Approx(all.seconds).epsilon(1e-12));
  CHECK(ilp.peak <= budget);
  CHECK(plan::model_peak(p, ilp.choices) == ilp.peak);
  CHECK(plan::model_consistent(p, ilp.choices));
}

}  // namespace

TEST_CASE("per-tensor plans: the ILP finds the brute force's optimum over all 3^k choices") {
  if (!plan::ilp_available()) {
    MESSAGE("built without GLPK (MG_GLPK): the ILP is not there to check");
    return;
  }
  SUBCASE("random problems") {
    std::mt19937 rng(11);
    int feasible = 0;
    for (int n = 0; n < 150; ++n) {
      const size_t k = size_t(1 + n % 8);
      const plan::TensorProblem p = random_problem(rng, k, 12);
      const int64_t top = *std::max_element(p.base.begin(), p.base.end());
      for (int64_t cut : {0, 4, 8, 16, 24, 40}) {
        check_optimum(p, top - cut * plan::kGranule);
        feasible += plan::brute_force(p, top - cut * plan::kGranule).feasible;
      }
    }
    CHECK(feasible > 200);  // many budgets can be met, and most need something to leave
  }
  SUBCASE("the 8 largest saved tensors of a GPT step") {
    const train::InputShape in{16, 32};
    const plan::Program program = plan::program(train::ModelSpec::gpt_model(small_gpt()), in, {});
    const budget::CostModel m = budget::CostModel::fixed();
    const plan::TensorProblem whole = plan::tensor_problem(plan::trace_step(program, plan::context(in), m), m);
    REQUIRE(whole.storages.size() > 8);
    std::vector<size_t> order(whole.storages.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return whole.storages[a].bytes > whole.storages[b].bytes; });
    order.resize(8);
    std::sort(order.begin(), order.end());
    const plan::TensorProblem p = subset(whole, order);
    int64_t gone = 0, recomputable = 0;
    for (const plan::SavedStorage& s : p.storages) gone += s.bytes, recomputable += s.recompute_seconds >= 0;
    CHECK(recomputable > 0);
    const int64_t top = *std::max_element(p.base.begin(), p.base.end());
    for (int share = 0; share <= 10; ++share) check_optimum(p, top - gone * share / 10);
  }
}

TEST_CASE("per-tensor plans: under the budget to the byte on meta, and the same on the cpu, bitwise") {
  if (!plan::ilp_available()) {
    MESSAGE("built without GLPK (MG_GLPK): no per-tensor plans");
    return;
  }
  const train::InputShape in{16, 32};
  auto losses = std::make_shared<std::vector<double>>();
  const plan::Program program = recording(in, losses);
  const plan::StepContext ctx = plan::context(in);
  plan::StepContext cpu = ctx;
  cpu.device = kCPU;
  plan::PlanOptions steps;
  steps.steps = 4;
  manual_seed(5);
  losses->clear();
  plan::measure(program, cpu, steps);
  const std::vector<double> free_losses = *losses;
  REQUIRE(free_losses.size() == 4);
  // Host copies at 20 GB/s: offload is cheaper than any recompute; at 1 GB/s recomputes win too.
  for (double host : {2e10, 1e9})
    for (double share : {0.7, 0.5}) {
      budget::CostModel m;
      m.host_bytes_per_second = host;
      budget::Options keep;
      keep.remat = budget::Remat::None, keep.model = m;
      const plan::TimedPlan none = plan::time_plan(program, ctx, "none", train::Policy::none(), keep, 0);
      REQUIRE(none.fits());
      const int64_t budget = int64_t(share * double(none.peak())) / plan::kGranule * plan::kGranule;
      CAPTURE(host);
      CAPTURE(share);
      plan::TimedPlan t = plan::choose_per_tensor(program, ctx, budget, m);
      REQUIRE(t.fits());
      CHECK(t.method == "ILP");
      CHECK(t.peak() <= budget);
      int64_t offloaded = 0, recomputed = 0;
      for (const budget::Directive& d : t.runtime.directives)
        (d.action == budget::Directive::Action::Offload ? offloaded : recomputed) += 1;
      CHECK(offloaded + recomputed > 0);
      if (host < 2e9) CHECK(recomputed > 0);
      // The prediction is the model's: the traced step, plus the planned copies and recomputes; the
      // model's peak is within the budget.
      const plan::TensorProblem p = plan::tensor_problem(plan::trace_step(program, ctx, m), m);
      std::vector<Choice> choices(p.storages.size(), Choice::Keep);
      for (const budget::Directive& d : t.runtime.directives)
        for (size_t i = 0; i < p.storages.size(); ++i)
          if (p.storages[i].birth == d.birth)
            choices[i] = d.action == budget::Directive::Action::Offload ? Choice::Offload : Choice::Recompute;
      CHECK(plan::model_peak(p, choices) <= budget);
      // A replay that also makes what another planned recompute needs at the same kernel is shared
      // there: the model, which prices each recompute alone, bounds the time from above.
      const double modeled = plan::model_seconds(p, choices);
      if (recomputed == 0) CHECK(t.predicted == doctest::Approx(modeled).epsilon(1e-9));
      CHECK(t.predicted <= modeled * (1 + 1e-9));
      // Each step does exactly what the plan says: nothing else leaves, nothing planned is skipped.
      const budget::Stats& s = t.planned.budget;
      CHECK(s.directives_missed == 0);
      CHECK(s.offloads == 4 * offloaded);
      CHECK(s.evictions == 4 * recomputed);
      // On the cpu: the same, and the same losses as without a budget.
      manual_seed(5);
      losses->clear();
      const plan::StepReport ran = plan::measure_plan(program, cpu, t);
      REQUIRE_FALSE(ran.out_of_memory);
      CHECK(ran.reserved <= budget);
      CHECK(ran.budget.directives_missed == 0);
      CHECK(ran.budget.offloads == s.offloads);
      CHECK(ran.budget.evictions == s.evictions);
      CHECK(ran.budget.rematerializations == s.rematerializations);
      CHECK(*losses == free_losses);
    }
}
