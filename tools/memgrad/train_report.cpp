#include <algorithm>
#include <cstdio>
#include <random>

#include "report.h"
#include "sharding.h"
#include "train_run.h"

namespace memgrad_cli {

namespace {

// Samples `n` bytes from the GPT after a newline, at temperature 0.8, without recording history.
std::string sample_text(mg::nn::GPT& gpt, const mg::Device& device, int64_t n, uint64_t seed) {
  mg::NoGradGuard no_grad;
  gpt.eval();
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ctx = {int64_t('\n')};
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t T = std::min<int64_t>(int64_t(ctx.size()), gpt.config.block_size);
    std::vector<int64_t> window(ctx.end() - T, ctx.end());
    mg::Tensor logits = gpt.forward(mg::tensor(window, {1, T}).to(device))
                            .select(1, T - 1)
                            .reshape({-1})
                            .slice(0, 0, 256);  // bytes only
    std::vector<float> p = mg::softmax(logits * (1.0 / 0.8), 0).to(mg::kCPU).to_vector<float>();
    std::discrete_distribution<int64_t> pick(p.begin(), p.end());
    const int64_t next = pick(rng);
    ctx.push_back(next);
    out.push_back(char(next));
  }
  gpt.train();
  return out;
}

}  // namespace

void TrainRun::report_training() {
  steps_run = f.steps - first + 1;
  std::printf("\ntrained %lld steps in %s: %.0f %s/s, final loss %.4f", static_cast<long long>(steps_run),
              format_seconds(train_seconds).c_str(), double(tokens_per_step * steps_run) / train_seconds,
              data.is_gpt() ? "tokens" : "rows", loss);
  if (scaler && scaler->skipped_steps())
    std::printf(" (%lld steps skipped by the grad scaler)", static_cast<long long>(scaler->skipped_steps()));
  std::printf("\n");
  communication = dp ? dp->communication_seconds() - communication_before : 0;
  data.print_wait(steps_run, train_seconds);
  if (dp)
    std::printf("communication: rank 0 was blocked waiting for reductions and gathers %s of %s (%.1f%%)\n",
                format_seconds(communication).c_str(), format_seconds(train_seconds).c_str(),
                100.0 * communication / train_seconds);
  if (dp && dp->units()) print_unit_traffic(dp->units()->stats(), steps_run, train_seconds, f.step.unit_prefetch);

  // Held-out loss, without recording history: no activations are kept. Sharded parameters are gathered
  // unit by unit, a collective: every rank evaluates (ranks > 0 print nowhere).
  const bool sharded = dp && dp->units();
  if (data.is_gpt() && (rank == 0 || sharded)) {
    data.print_held_out_loss(*chain, dp);
    if (f.sample > 0 && sharded && f.memory_limit) {
      std::printf(
          "sample: none (generating runs the whole model at once, and --zero 3 / --offload params keep it "
          "whole on no device under --memory-limit)\n");
    } else if (f.sample > 0) {
      const auto whole = dp ? dp->full_parameters() : nullptr;  // collective
      std::printf("sample:\n%s\n",
                  sample_text(dynamic_cast<mg::nn::GPT&>(chain->module()), device, f.sample, f.seed).c_str());
    }
  }

  if (steps_run == 1) {  // no later step: the breakdown of the first
    const mg::MemoryStats m = mg::memory_stats(device);
    at_peak = m.at_peak_by_category;
    for (int c = 0; c < mg::kNumCategories; ++c) at_peak[size_t(c)] -= base.by_category[size_t(c)];
    owners_at_peak = owners_since_base(m.at_peak_by_owner);
  }
  std::printf("\nmemory on %s at the peak of step%s %lld%s%s, counted from before the model was built:\n",
              device.str().c_str(), steps_run > 1 ? "s" : "", static_cast<long long>(std::min(first + 1, f.steps)),
              steps_run > 2 ? "-" : "", steps_run > 2 ? std::to_string(f.steps).c_str() : "");
  print_breakdown(steps_run > 1 ? peaks[1] : peaks[0], at_peak, owners_at_peak, 12);
  after = mg::memory_stats(device);
  std::printf("  reserved by the caching allocator: %s now\n", mg::format_bytes(after.reserved).c_str());
  if (driver_before) print_outside_ledger(*driver_before, mg::cuda::device_memory(device.index));
}

void TrainRun::report_plan() {
  // The planner runs the same steps on meta, for this device and under the same limit.
  mg::plan::PlanOptions plan_options;
  plan_options.device = device.type;
  plan_options.memory_limit = budgeted ? 0 : int64_t(f.memory_limit);  // a budget is the runtime's, not the allocator's
  plan_options.max_steps = std::min<int64_t>(steps_run, 16);
  mg::reset_host_peak(mg::kMeta);
  planned = mg::plan::plan(train_program(spec, step_flags), mg::plan::context(shape, policy), plan_options);
  const int64_t planned_host_peak = mg::host_memory_stats(mg::kMeta).peak;
  auto compare = [&](const char* what, int64_t measured, int64_t plan_bytes) {
    std::string verdict = measured == plan_bytes ? "exact" : "off by " + std::to_string(measured - plan_bytes) + " B";
    if (measured != plan_bytes && scaler && scaler->skipped_steps())
      verdict += ": the grad scaler skipped steps (inf/NaN gradients), the plan assumes every step is taken";
    std::printf("  %s: measured %s (%lld B), planned on meta %s (%lld B): %s\n", what,
                mg::format_bytes(measured).c_str(), static_cast<long long>(measured),
                mg::format_bytes(plan_bytes).c_str(), static_cast<long long>(plan_bytes), verdict.c_str());
  };
  if (!f.resume.empty()) {  // a resumed run's first step already holds optimizer state: only later steps compare
    if (steps_run > 1) compare("later steps' allocated peak", peaks[1], planned_peaks[1] = planned.peak);
    std::printf("  (a resumed run's allocator history differs from the plan's, which starts from the first step)\n");
  } else {
    compare("first step's allocated peak", peaks[0], planned_peaks[0] = planned.first_peak);
    if (steps_run > 1) compare("later steps' allocated peak", peaks[1], planned_peaks[1] = planned.peak);
    if (!budgeted)  // the budget runs with caching off: its reserved bytes are not the plan's
      compare(f.memory_limit ? "reserved peak under this --memory-limit" : "reserved peak with no limit", reserved,
              planned.reserved);
  }
  if (planned.smallest_limit)
    std::printf("  the smallest --memory-limit these steps run under: %s (%lld B)\n",
                mg::format_bytes(planned.smallest_limit).c_str(), static_cast<long long>(planned.smallest_limit));
  if (timed) report_timed_plan();
  if (budgeted && !timed) {
    std::printf("  memory budget %s (--remat %s, --offload %s): the plan above is the unconstrained step\n",
                mg::format_bytes(int64_t(f.memory_limit)).c_str(), f.remat.c_str(), f.offload.c_str());
    std::printf("  %s\n", mg::budget::stats_report(device).c_str());
    std::printf("  the floor of this mode over these steps: %s\n", mg::budget::floor(device).str().c_str());
  }
  if (offload_params) print_host_memory(device, host_after_step, host_base.allocated, planned_host_peak);
  data.print_memory();
}

// --plan: each step against the plan carried out (its meta run under the budget): the peaks to the
// byte, and the time the cost model predicted against the clock's.
void TrainRun::report_timed_plan() const {
  const mg::plan::TimedPlan& p = *timed;
  const size_t apart = p.runtime.directives.size();
  std::printf(
      "  the plan carried out (the %s candidate%s): %s, segments %s, %sunder a budget of %s (%lld B), predicted "
      "%.2f ms a step\n",
      p.chosen_from.c_str(), f.plan == "mixed" ? ", chosen now" : (", from " + f.plan).c_str(), p.mode().c_str(),
      p.policy.str().c_str(), apart ? (std::to_string(apart) + " tensors planned apart, ").c_str() : "",
      mg::format_bytes(p.budget).c_str(), static_cast<long long>(p.budget), p.predicted * 1e3);
  std::vector<double> later(step_seconds.begin() + (step_seconds.size() > 1 ? 1 : 0), step_seconds.end());
  std::sort(later.begin(), later.end());
  if (!later.empty())
    std::printf("  steps %lld-%lld measured: fastest %.2f ms, median %.2f ms, against %.2f ms predicted (%.2fx)\n",
                static_cast<long long>(first + (step_seconds.size() > 1 ? 1 : 0)), static_cast<long long>(f.steps),
                later.front() * 1e3, later[later.size() / 2] * 1e3, p.predicted * 1e3,
                p.predicted > 0 ? later.front() / p.predicted : 0.0);
  int64_t off = 0;  // steps whose peak is not the plan's
  for (size_t i = 0; i < step_peaks.size(); ++i)
    off += step_peaks[i] != (first + int64_t(i) == 1 ? p.planned.first_peak : p.planned.peak);
  std::printf(
      "  each step's allocated peak against the plan's on meta under the budget (%lld B first, %lld B later): "
      "%s\n",
      static_cast<long long>(p.planned.first_peak), static_cast<long long>(p.planned.peak),
      off ? (std::to_string(off) + " of " + std::to_string(step_peaks.size()) + " steps differ").c_str()
          : "exact in every step");
  std::printf("  %s\n", mg::budget::stats_report(device).c_str());
}

void TrainRun::report_ranks_and_state() {
  mg::nn::Module& model = chain->module();
  mg::optim::Optimizer& opt = *trainer->optimizer();
  if (dp) {  // every rank's figures, gathered (the calls below are collective: every rank makes them)
    auto held = [this](mg::Category c) { return after_step[size_t(c)]; };
    const std::vector<int64_t> mine = {peaks[0],
                                       peaks[1],
                                       planned_peaks[0],
                                       planned_peaks[1],
                                       held(mg::Category::Parameter),
                                       held(mg::Category::Gradient),
                                       held(mg::Category::OptimizerState),
                                       int64_t(communication * 1e6),
                                       int64_t(train_seconds * 1e6),
                                       reserved,
                                       f.resume.empty() && !budgeted ? planned.reserved : -1};
    const std::vector<int64_t> all = world->all_gather(mine);
    const int stage = dp->zero_stage();
    const int64_t formula = zero_formula_bytes(model.num_parameters(), options, stage, ranks);
    std::printf(
        "\nevery rank (%d process%s, ZeRO stage %d): each step's peak and the reserved peak, measured and planned on "
        "meta for that rank; the bytes it holds after a step, beside ZeRO's formula for stage %d (%s%lld "
        "parameters: %s B); its time blocked on communication\n",
        ranks, ranks > 1 ? "es" : "", stage, stage, offload_params ? "in host memory, not on the device: " : "",
        static_cast<long long>(model.num_parameters()), thousands(formula).c_str());
    for (int r = 0; r < ranks; ++r) {
      const int64_t* v = &all[size_t(r) * mine.size()];
      std::string line = "  rank " + std::to_string(r) + ":";
      for (int i = 0; i < 2; ++i)
        if (v[2 + i] >= 0)
          line += std::string(i ? " later steps " : " first step ") + std::to_string(v[i]) + " B, planned " +
                  std::to_string(v[2 + i]) + " B: " + (v[i] == v[2 + i] ? "exact;" : "differs;");
      if (v[10] >= 0)
        line += " reserved " + std::to_string(v[9]) + " B, planned " + std::to_string(v[10]) +
                " B: " + (v[9] == v[10] ? "exact;" : "differs;");
      char tail[320];
      std::snprintf(tail, sizeof tail,
                    " Parameter %lld B + Gradient %lld B + OptimizerState %lld B = %lld B (formula %lld B); "
                    "communication %.1f%%",
                    static_cast<long long>(v[4]), static_cast<long long>(v[5]), static_cast<long long>(v[6]),
                    static_cast<long long>(v[4] + v[5] + v[6]), static_cast<long long>(formula),
                    v[8] ? 100.0 * double(v[7]) / double(v[8]) : 0.0);
      std::printf("%s%s\n", line.c_str(), tail);
    }
    const std::string table = dp->shard_table(opt);
    std::printf(
        "\noptimizer state per parameter (%s): which rank holds which elements, and the bytes of state its "
        "ledger holds for them\n%s",
        opt.type().c_str(), table.c_str());
  } else {
    // Between steps zero_grad(set_to_none) has freed every gradient: show what each held at the peak
    // (the ledger names a gradient "<its parameter's owner>.grad"; an owner may be the name's tail).
    mg::optim::StateReport state = opt.state_report();
    state.grad_bytes = 0;
    for (auto& row : state.rows) {
      row.grad_bytes = 0;
      for (auto& [owner, bytes] : owners_at_peak) {
        const size_t n = owner.size() - 5;
        if (owner.size() > 5 && owner.compare(n, 5, ".grad") == 0 && row.name.size() >= n &&
            row.name.compare(row.name.size() - n, n, owner, 0, n) == 0 &&
            (row.name.size() == n || row.name[row.name.size() - n - 1] == '.'))
          row.grad_bytes = bytes;
      }
      state.grad_bytes += row.grad_bytes;
    }
    std::printf("\noptimizer state per parameter (%s; grad B: each gradient at the peak above):\n%s",
                opt.type().c_str(), state.str().c_str());
  }
  if (timeline && !f.timeline.empty()) std::printf("memory timeline: %s\n", f.timeline.c_str());
  if (timeline && !f.snapshot.empty()) std::printf("memory snapshot: %s (memgrad view draws it)\n", f.snapshot.c_str());
  if (!f.save.empty()) {
    const mg::optim::StateDict optimizer = dp ? dp->state_dict(opt) : opt.state_dict();     // collective with dp
    const mg::nn::StateDict whole = dp ? dp->model_state_dict(model) : model.state_dict();  // collective with dp
    mg::nn::Metadata metadata = data.state();
    metadata["memgrad.saved_by"] = std::to_string(ranks) + " process" + (ranks > 1 ? "es" : "") +
                                   (dp ? ", ZeRO stage " + std::to_string(dp->zero_stage()) : "") +
                                   (offload_params ? ", --offload params" : "");
    std::vector<std::string> names;  // DataParallel's order of the parameters: its masters' ("master.<i>")
    for (auto& [name, t] : model.named_parameters()) names.push_back(name);
    if (rank == 0)
      save_state(f.save, f.steps, signature, whole, optimizer, names, dp ? nullptr : trainer->masters(), scaler,
                 metadata);
    if (world) world->barrier();  // the file exists when any rank returns
    std::printf("training state (step %lld): %s\n", static_cast<long long>(f.steps), f.save.c_str());
  }
}

}  // namespace memgrad_cli
