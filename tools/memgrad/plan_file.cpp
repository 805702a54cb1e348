#include "plan_file.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include <memgrad/core/files.h>

namespace memgrad_cli {

namespace {
using Clock = std::chrono::steady_clock;
constexpr const char* kHeader = "memgrad plan 1";

const char* remat_name(mg::budget::Remat r) { return r == mg::budget::Remat::Dynamic ? "dynamic" : "none"; }
const char* offload_name(mg::budget::Offload o) {
  return o == mg::budget::Offload::Activations ? "activations"
         : o == mg::budget::Offload::Optimizer ? "optimizer"
         : o == mg::budget::Offload::All       ? "all"
                                               : "none";
}
}  // namespace

mg::budget::CostModel cost_model_for(const mg::train::ModelSpec& spec, const StepFlags& flags,
                                     const std::string& cost_model, const mg::plan::PlanOptions& options) {
  if (cost_model != "fit") return mg::budget::CostModel::fixed();
  // The blocks are alike: two of them run every kernel shape of the step (and the step from one
  // block to the next), at a fraction of the whole model's time.
  mg::train::ModelSpec fit = spec;
  int64_t& blocks = spec.kind == mg::train::ModelSpec::Kind::GPT ? fit.gpt.n_layer : fit.mlp_layers;
  blocks = std::min<int64_t>(blocks, kFitBlocks);
  mg::plan::StepContext cpu = mg::plan::context(input_shape(flags));
  cpu.device = mg::kCPU;
  return mg::plan::fit_cost_model(train_program(fit, flags), cpu, options);
}

mg::plan::TimedPlan choose_mixed_plan(const mg::train::ModelSpec& spec, const StepFlags& flags, int64_t budget,
                                      const std::string& cost_model, const mg::plan::PlanOptions& options,
                                      std::vector<mg::plan::TimedPlan>* candidates) {
  using namespace mg::plan;
  const Program program = train_program(spec, flags);
  StepContext ctx = context(input_shape(flags));
  PlanOptions o = options;
  const auto t0 = Clock::now();
  o.progress = [t0](const std::string& what) {  // quiet unless it takes a while
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 3) std::fprintf(stderr, "memgrad: planning under the budget, %.0f s: %s\n", s, what.c_str());
  };
  const mg::budget::CostModel model = cost_model_for(spec, flags, cost_model, o);
  std::vector<TimedPlan> all = mixed_candidates(program, ctx, budget, model, o);
  TimedPlan best = best_mixed(all);
  if (candidates) *candidates = std::move(all);
  if (!best.fits())
    throw mg::OutOfMemoryError("--plan mixed: no plan keeps, recomputes or offloads its way under " +
                               mg::format_bytes(budget) + " (" + std::to_string(budget) +
                               " B); memgrad train --remat dynamic --offload all goes lowest.");
  return best;
}

std::string plan_signature(const mg::train::ModelSpec& spec, const StepFlags& s) {
  std::ostringstream os;
  os << model_str(spec) << ", dropout " << (spec.kind == mg::train::ModelSpec::Kind::GPT ? spec.gpt.dropout : 0.0)
     << "; batch " << s.batch << " x " << s.seq << ", accum " << s.accum << "; " << s.optimizer << " momentum "
     << s.momentum << " clip " << s.clip << "; " << s.precision;
  return os.str();
}

void save_plan(const std::string& path, const mg::plan::TimedPlan& p, const std::string& signature) {
  std::ostringstream out;  // written whole, as --save is (core/files.h): a full disk is an error, not 0 bytes
  out.precision(17);
  const mg::budget::Options& r = p.runtime;
  out << kHeader << "\nrun " << signature << "\nmethod " << p.chosen_from << "\nbudget " << p.budget << "\npolicy "
      << p.policy.name << "\nselective " << p.policy.selective << "\nsegments";
  for (const auto& s : p.policy.segments) out << ' ' << s.begin << ' ' << s.end;
  out << "\nremat " << remat_name(r.remat) << "\noffload " << offload_name(r.offload) << "\nprefetch " << r.prefetch
      << "\ncost_model " << r.model.flops_per_second << ' ' << r.model.bytes_per_second << ' '
      << r.model.seconds_per_kernel << ' ' << r.model.host_bytes_per_second << "\npredicted " << p.predicted
      << "\npeak " << p.planned.peak << "\nfirst_peak " << p.planned.first_peak << "\nreserved " << p.planned.reserved
      << "\nsteps " << p.planned.steps << '\n';
  for (const mg::budget::Directive& d : r.directives)
    out << "directive " << d.birth << ' '
        << (d.action == mg::budget::Directive::Action::Offload ? "offload" : "recompute") << ' ' << d.leave_after << ' '
        << d.bytes << ' ' << d.kernel << '\n';
  mg::write_file_atomically(path, out.str(), "--save-plan");
}

mg::plan::TimedPlan load_plan(const std::string& path, const std::string& signature) {
  std::istringstream in;
  try {  // a FIFO or a device is refused, not read for ever
    in.str(mg::InputFile(path, "--plan").read_all());
  } catch (const mg::IOError& e) {
    throw UsageError(e.what());
  }
  const std::string flag = "--plan " + path + ": ";
  std::string line;
  if (!std::getline(in, line) || line != kHeader)
    throw UsageError(flag + "not a plan written by memgrad plan --save-plan (expected the line '" + kHeader + "')");
  mg::plan::TimedPlan p;
  p.method = "mixed", p.runtime.remat = mg::budget::Remat::None, p.runtime.cost = mg::budget::Cost::Modeled;
  bool budget = false;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string key;
    f >> key;
    std::string rest;
    std::getline(f >> std::ws, rest);
    std::istringstream v(rest);
    auto fail = [&] { return UsageError(flag + "a malformed line: '" + line + "'"); };
    if (key == "run") {
      if (rest != signature)
        throw UsageError(flag + "planned for another run:\n  planned: " + rest + "\n  now:     " + signature);
    } else if (key == "method") {
      p.chosen_from = rest;
    } else if (key == "budget") {
      if (!(v >> p.budget) || p.budget <= 0) throw fail();
      budget = true;
    } else if (key == "policy") {
      p.policy.name = rest;
    } else if (key == "selective") {
      if (!(v >> p.policy.selective)) throw fail();
    } else if (key == "segments") {
      int64_t b, e;
      while (v >> b >> e) p.policy.segments.push_back({b, e});
    } else if (key == "remat") {
      p.runtime.remat = rest == "dynamic" ? mg::budget::Remat::Dynamic : mg::budget::Remat::None;
    } else if (key == "offload") {
      p.runtime.offload = rest == "activations" ? mg::budget::Offload::Activations
                          : rest == "optimizer" ? mg::budget::Offload::Optimizer
                          : rest == "all"       ? mg::budget::Offload::All
                                                : mg::budget::Offload::None;
    } else if (key == "prefetch") {
      if (!(v >> p.runtime.prefetch)) throw fail();
    } else if (key == "cost_model") {
      mg::budget::CostModel& m = p.runtime.model;
      if (!(v >> m.flops_per_second >> m.bytes_per_second >> m.seconds_per_kernel >> m.host_bytes_per_second))
        throw fail();
    } else if (key == "predicted") {
      if (!(v >> p.predicted)) throw fail();
    } else if (key == "peak" || key == "first_peak" || key == "reserved" || key == "steps") {
      int64_t x;
      if (!(v >> x)) throw fail();
      (key == "peak"         ? p.planned.peak
       : key == "first_peak" ? p.planned.first_peak
       : key == "reserved"   ? p.planned.reserved
                             : p.planned.steps) = x;
    } else if (key == "directive") {
      mg::budget::Directive d;
      std::string action;
      if (!(v >> d.birth >> action >> d.leave_after >> d.bytes >> d.kernel)) throw fail();
      d.action =
          action == "offload" ? mg::budget::Directive::Action::Offload : mg::budget::Directive::Action::Recompute;
      p.runtime.directives.push_back(d);
    } else if (!key.empty()) {
      throw UsageError(flag + "an unknown line: '" + line + "'");
    }
  }
  if (!budget) throw UsageError(flag + "no budget in the file");
  return p;
}

void apply_plan(const mg::Device& device, const mg::plan::TimedPlan& p) {
  mg::budget::Options o = p.runtime;
  o.limit = p.budget;
  o.cost = mg::budget::Cost::Modeled;  // decides as on meta: the plan's evictions and offloads, no others
  mg::set_caching(device, false);
  mg::budget::enable(device, o);
}

}  // namespace memgrad_cli
