// Step time under a memory budget, every way memgrad meets one: dynamic remat (DTR), activation
// offload, both (remat with offload of everything), the planner's fastest recompute-only plan (DP)
// and its mixed plan (keep, recompute or offload, plan/mixed.h), at 70/50/40/30% of the
// unconstrained peak and at dynamic remat's floor. Each plan is timed by the cost model fitted to
// this machine on the program (the prediction) and run on the cpu (wall time of the fastest of steps 2-4,
// twice: run 1 / run 2). Prints markdown for RESULTS.md; "-" where a method does not fit.
//   bench_budget_plans [gpt|mlp|both]
#include <cstdio>
#include <string>
#include <vector>

#include <memgrad/plan/planner.h>

using namespace mg;

namespace {

void bench(const char* name, const train::ModelSpec& spec, const train::InputShape& in) {
  const plan::Program p = plan::program(spec, in, {optim::OptimizerSpec("adamw"), train::Precision::Float32});
  const plan::StepContext ctx = plan::context(in);
  plan::StepContext cpu = ctx;
  cpu.device = kCPU;
  const budget::CostModel model = plan::fit_cost_model(p, cpu);
  auto options = [&](budget::Remat remat, budget::Offload offload) {
    budget::Options b;
    b.remat = remat, b.offload = offload, b.model = model;
    return b;
  };
  plan::TimedPlan free_run =
      plan::time_plan(p, ctx, "none", train::Policy::none(), options(budget::Remat::None, budget::Offload::None), 0);
  plan::measure_plan(p, cpu, free_run);
  const int64_t peak = free_run.peak();
  const int64_t floor = free_run.planned.floors[1][0].bytes;
  std::printf("\n### %s: unconstrained peak %s (%lld B), step %.1f ms (predicted %.1f ms); remat floor %s (%lld B)\n",
              name, format_bytes(peak).c_str(), static_cast<long long>(peak), free_run.measured * 1e3,
              free_run.predicted * 1e3, format_bytes(floor).c_str(), static_cast<long long>(floor));
  std::printf("cost model fitted on 3 steps: %s\n\n", model.str().c_str());
  std::printf(
      "| budget | dynamic remat | offload | both | static DP | mixed plan (its mode) | mixed: predicted |\n"
      "|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<std::string, int64_t>> budgets;
  for (int share : {70, 50, 40, 30}) budgets.push_back({std::to_string(share) + "%", peak * share / 100 / 512 * 512});
  budgets.push_back({"floor", (floor + 511) / 512 * 512});
  for (const auto& [label, b] : budgets) {
    const std::vector<plan::TimedPlan> candidates = plan::mixed_candidates(p, ctx, b, model);
    std::vector<plan::TimedPlan> row = {plan::time_plan(p, ctx, "dynamic", train::Policy::none(),
                                                        options(budget::Remat::Dynamic, budget::Offload::None), b),
                                        plan::time_plan(p, ctx, "offload", train::Policy::none(),
                                                        options(budget::Remat::None, budget::Offload::Activations), b),
                                        plan::time_plan(p, ctx, "both", train::Policy::none(),
                                                        options(budget::Remat::Dynamic, budget::Offload::All), b),
                                        plan::best_recompute(candidates), plan::best_mixed(candidates)};
    std::printf("| %s (%s) |", label.c_str(), format_bytes(b).c_str());
    for (plan::TimedPlan& t : row) {
      if (!t.fits()) {
        std::printf(" - |");
        continue;
      }
      double runs[2];
      bool ran = true;
      for (double& s : runs) {
        ran = ran && !plan::measure_plan(p, cpu, t).out_of_memory;
        s = t.measured;
      }
      if (!ran) {
        std::printf(" - (out of memory on the cpu) |");
        continue;
      }
      std::printf(" %.1f / %.1f ms (%+.0f%% / %+.0f%%)%s |", runs[0] * 1e3, runs[1] * 1e3,
                  100 * (runs[0] / free_run.measured - 1), 100 * (runs[1] / free_run.measured - 1),
                  t.method == "mixed" ? (" (" + t.mode() + ")").c_str() : "");
    }
    const plan::TimedPlan& mixed = row.back();
    if (mixed.fits())
      std::printf(" %.1f ms (%+.0f%%; measured/predicted %.2f) |\n", mixed.predicted * 1e3,
                  100 * (mixed.predicted / free_run.predicted - 1), mixed.measured / mixed.predicted);
    else
      std::printf(" - |\n");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "both";
  if (which != "mlp") {
    nn::GPTConfig g;  // memgrad train's default model ("tiny") as the issue ran it: batch 8 x 64, dropout 0.1
    g.n_layer = 4, g.n_head = 4, g.n_embd = 128, g.vocab_size = 256, g.block_size = 64, g.dropout = 0.1;
    bench("GPT n_layer 4, n_embd 128, vocab 256, batch 8 x 64, dropout 0.1, AdamW", train::ModelSpec::gpt_model(g),
          {8, 64});
  }
  if (which != "gpt") bench("MLP 8 layers of 256, batch 4096, AdamW", train::ModelSpec::mlp(8, 256), {4096, 1});
  return 0;
}
