// Per-tensor plans: the problem from a traced step, its model, the ILP (GLPK) and a brute force to
// check it, and the plan verified by meta runs under the budget.
#include <memgrad/plan/per_tensor.h>

#include <algorithm>
#include <cmath>

#include <memgrad/core/error.h>

#if MG_WITH_GLPK
#include <glpk.h>
#endif

namespace mg::plan {

namespace {

bool away(Choice c) { return c != Choice::Keep; }
// True when `u` is gone at the kernel where `s` comes back.
bool gone_at(const SavedStorage& u, int64_t kernel) { return u.leave_after < kernel && kernel < u.back_at; }

budget::Options planned_run(const budget::CostModel& model) {
  budget::Options b;
  b.remat = budget::Remat::None, b.offload = budget::Offload::None, b.model = model, b.cost = budget::Cost::Modeled;
  b.prefetch = false;  // back when touched, as the model has it
  return b;
}

}  // namespace

TensorProblem tensor_problem(const budget::StepTrace& trace, const budget::CostModel& model) {
  TensorProblem p;
  for (const auto& k : trace.kernels) p.base.push_back(k.reserved), p.step_seconds += k.seconds;
  std::vector<int64_t> index(trace.storages.size(), -1);  // by birth
  std::vector<const std::vector<int64_t>*> needs;
  for (const auto& s : trace.storages) {
    if (!s.saved || s.gradient || s.uses.size() < 2) continue;
    size_t gap = 0;  // the longest stretch without a use: after uses[gap], before uses[gap + 1]
    for (size_t i = 1; i + 1 < s.uses.size(); ++i)
      if (s.uses[i + 1].kernel - s.uses[i].kernel > s.uses[gap + 1].kernel - s.uses[gap].kernel) gap = i;
    const budget::StepTrace::Use &a = s.uses[gap], &b = s.uses[gap + 1];
    if (b.kernel - a.kernel < 2) continue;  // no kernel in between
    SavedStorage x;
    x.birth = s.birth, x.kernel = s.kernel, x.bytes = s.bytes;
    x.leave_after = a.kernel, x.back_at = b.kernel;
    x.offload_seconds = 2 * model.copy_seconds(double(s.nbytes));
    x.recompute_seconds = b.recompute_seconds, x.recompute_bytes = b.recompute_bytes;
    index[size_t(s.birth)] = int64_t(p.storages.size());
    p.storages.push_back(std::move(x));
    needs.push_back(&b.needs);
  }
  for (size_t i = 0; i < p.storages.size(); ++i)  // what stays put anyway is not a constraint
    for (int64_t birth : *needs[i])
      if (index[size_t(birth)] >= 0) p.storages[i].needs.push_back(size_t(index[size_t(birth)]));
  return p;
}

int64_t model_peak(const TensorProblem& p, const std::vector<Choice>& choices) {
  std::vector<int64_t> bytes = p.base;
  for (size_t i = 0; i < p.storages.size(); ++i) {
    const SavedStorage& s = p.storages[i];
    if (!away(choices[i])) continue;
    for (int64_t t = s.leave_after + 1; t < s.back_at; ++t) bytes[size_t(t)] -= s.bytes;
    if (choices[i] == Choice::Recompute) bytes[size_t(s.back_at)] += s.recompute_bytes;
  }
  return bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
}

double model_seconds(const TensorProblem& p, const std::vector<Choice>& choices) {
  double seconds = p.step_seconds;
  for (size_t i = 0; i < p.storages.size(); ++i)
    seconds += choices[i] == Choice::Offload     ? p.storages[i].offload_seconds
               : choices[i] == Choice::Recompute ? p.storages[i].recompute_seconds
                                                 : 0;
  return seconds;
}

bool model_consistent(const TensorProblem& p, const std::vector<Choice>& choices) {
  for (size_t i = 0; i < p.storages.size(); ++i) {
    const SavedStorage& s = p.storages[i];
    if (choices[i] != Choice::Recompute) continue;
    if (s.recompute_seconds < 0) return false;
    for (size_t u : s.needs)
      if (away(choices[u]) && gone_at(p.storages[u], s.back_at)) return false;
  }
  return true;
}

namespace {
TensorPlan scored(const TensorProblem& p, std::vector<Choice> choices, int64_t budget) {
  TensorPlan t;
  t.peak = model_peak(p, choices);
  t.seconds = model_seconds(p, choices);
  t.feasible = t.peak <= budget && model_consistent(p, choices);
  t.choices = std::move(choices);
  return t;
}
}  // namespace

TensorPlan brute_force(const TensorProblem& p, int64_t budget) {
  const size_t k = p.storages.size();
  MG_CHECK(k <= 12, ValueError, "plan::brute_force: expected at most 12 storages (3^k choices), got ", k);
  TensorPlan best = scored(p, std::vector<Choice>(k, Choice::Keep), budget);
  best.optimal = true;
  std::vector<Choice> c(k, Choice::Keep);
  for (;;) {
    size_t i = 0;  // the next of the 3^k assignments, as a base-3 counter
    while (i < k && c[i] == Choice::Recompute) c[i++] = Choice::Keep;
    if (i == k) break;
    c[i] = Choice(int(c[i]) + 1);
    const TensorPlan t = scored(p, c, budget);
    if (t.feasible && (!best.feasible || t.seconds < best.seconds)) best = t, best.optimal = true;
  }
  return best;
}

#if MG_WITH_GLPK
bool ilp_available() { return true; }
TensorPlan solve_ilp(const TensorProblem& p, int64_t budget, double gap) {
  // Binary o_s (offload) and r_s (recompute) per storage, o_s + r_s <= 1; at each window whose
  // bytes could pass the budget, the bytes gone minus recomputes' extra >= the excess; a recompute
  // excludes the absence of what it reads: r_s + o_u + r_u <= 1. Minimum: the added seconds.
  const size_t k = p.storages.size();
  glp_term_out(GLP_OFF);
  glp_prob* lp = glp_create_prob();
  struct Free {
    glp_prob* lp;
    ~Free() { glp_delete_prob(lp); }
  } free_lp{lp};
  glp_set_obj_dir(lp, GLP_MIN);
  if (k) glp_add_cols(lp, int(2 * k));
  auto o = [](size_t s) { return int(2 * s + 1); };
  auto r = [](size_t s) { return int(2 * s + 2); };
  for (size_t s = 0; s < k; ++s) {
    const SavedStorage& x = p.storages[s];
    glp_set_col_kind(lp, o(s), GLP_BV), glp_set_col_kind(lp, r(s), GLP_BV);
    glp_set_obj_coef(lp, o(s), x.offload_seconds * 1e6);  // microseconds: coefficients near 1
    if (x.recompute_seconds < 0)
      glp_set_col_bnds(lp, r(s), GLP_FX, 0, 0);
    else
      glp_set_obj_coef(lp, r(s), x.recompute_seconds * 1e6);
  }
  std::vector<int> ind{0};
  std::vector<double> val{0};
  auto row = [&](int type, double lo, double hi) {
    const int i = glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, i, type, lo, hi);
    glp_set_mat_row(lp, i, int(ind.size() - 1), ind.data(), val.data());
    ind.assign(1, 0), val.assign(1, 0);
  };
  for (size_t s = 0; s < k; ++s) {
    ind.push_back(o(s)), val.push_back(1), ind.push_back(r(s)), val.push_back(1);
    row(GLP_UP, 0, 1);
    for (size_t u : p.storages[s].needs)
      if (gone_at(p.storages[u], p.storages[s].back_at)) {
        ind.push_back(r(s)), val.push_back(1), ind.push_back(o(u)), val.push_back(1);
        ind.push_back(r(u)), val.push_back(1);
        row(GLP_UP, 0, 1);
      }
  }
  const double unit = double(kGranule);  // bytes in granules: coefficients of moderate size
  for (size_t t = 0; t < p.base.size(); ++t) {
    int64_t extra = 0;
    for (const SavedStorage& x : p.storages) extra += x.back_at == int64_t(t) ? x.recompute_bytes : 0;
    if (p.base[t] + extra <= budget) continue;
    for (size_t s = 0; s < k; ++s) {
      const SavedStorage& x = p.storages[s];
      if (gone_at(x, int64_t(t))) {
        ind.push_back(o(s)), val.push_back(double(x.bytes) / unit);
        ind.push_back(r(s)), val.push_back(double(x.bytes) / unit);
      } else if (x.back_at == int64_t(t) && x.recompute_bytes) {
        ind.push_back(r(s)), val.push_back(-double(x.recompute_bytes) / unit);
      }
    }
    row(GLP_LO, double(p.base[t] - budget) / unit, 0);
  }
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.presolve = GLP_ON;
  parm.msg_lev = GLP_MSG_OFF;
  // Offload costs in proportion to bytes, so the LP bound sits a fraction of a tensor below the
  // optimum (a subset sum), and branching alone does not close the gap (minutes on a 48-tensor GPT
  // step): cover, MIR and Gomory cuts mostly do, and `gap` stops the search where the rest would be
  // a proof. The time limit only guards against a pathological problem (then optimal is false).
  parm.mir_cuts = parm.cov_cuts = parm.gmi_cuts = parm.clq_cuts = GLP_ON;
  parm.mip_gap = gap;
  parm.tm_lim = 60000;
  std::vector<Choice> choices(k, Choice::Keep);
  const int solved = glp_intopt(lp, &parm), status = glp_mip_status(lp);
  if ((solved != 0 && solved != GLP_EMIPGAP && solved != GLP_ETMLIM) || (status != GLP_OPT && status != GLP_FEAS)) {
    TensorPlan none = scored(p, choices, budget);
    none.feasible = false, none.optimal = solved != GLP_ETMLIM;  // no choice meets it (or none was found in time)
    return none;
  }
  for (size_t s = 0; s < k; ++s)
    choices[s] = glp_mip_col_val(lp, o(s)) > 0.5   ? Choice::Offload
                 : glp_mip_col_val(lp, r(s)) > 0.5 ? Choice::Recompute
                                                   : Choice::Keep;
  TensorPlan t = scored(p, std::move(choices), budget);  // the model's own figures, not the solver's floats
  t.optimal = solved != GLP_ETMLIM;
  return t;
}
#else
bool ilp_available() { return false; }
TensorPlan solve_ilp(const TensorProblem&, int64_t, double) {
  throw Error("plan::solve_ilp: memgrad was built without GLPK (cmake -DMG_GLPK=ON, Debian's libglpk-dev)");
}
#endif

std::vector<budget::Directive> directives(const TensorProblem& p, const TensorPlan& plan) {
  std::vector<budget::Directive> out;
  for (size_t i = 0; i < p.storages.size(); ++i) {
    if (!away(plan.choices[i])) continue;
    const SavedStorage& s = p.storages[i];
    budget::Directive d;
    d.birth = s.birth, d.leave_after = s.leave_after, d.bytes = s.bytes, d.kernel = s.kernel;
    d.action =
        plan.choices[i] == Choice::Offload ? budget::Directive::Action::Offload : budget::Directive::Action::Recompute;
    out.push_back(std::move(d));
  }
  return out;
}

budget::StepTrace trace_step(const Program& program, const StepContext& ctx, const budget::CostModel& model,
                             const PlanOptions& options) {
  budget::Options watch = planned_run(model);
  watch.trace = true;
  PlanOptions o = options;
  if (o.steps == 0) o.steps = 4;  // as time_plan runs them: the last one is steady
  o.smallest_limit = false, o.memory_limit = 0, o.budget = watch;
  const StepReport r = plan(program, ctx, o);
  MG_CHECK(!r.out_of_memory, Error, "plan::trace_step: the step failed on meta without a limit: ", r.oom_message);
  return budget::trace(kMeta);
}

TimedPlan choose_per_tensor(const Program& program, const StepContext& ctx, int64_t budget,
                            const budget::CostModel& model, const PlanOptions& options) {
  const TensorProblem p = tensor_problem(trace_step(program, ctx, model, options), model);
  TimedPlan none;
  none.method = "ILP", none.runtime = planned_run(model), none.budget = budget, none.planned.out_of_memory = true;
  none.planned.oom_message = "no per-tensor plan fits";
  // The model counts each storage's bytes where the reserved bytes may differ by what the
  // allocator's segments round to: where the meta run ends above the budget, ask for that much less.
  int64_t target = budget;
  for (int tries = 0; tries < 8; ++tries) {
    const TensorPlan solved = solve_ilp(p, target);
    if (!solved.feasible) break;
    budget::Options run = planned_run(model);
    run.directives = directives(p, solved);
    const TimedPlan free = time_plan(program, ctx, "ILP", train::Policy::none(), run, 0, options);
    if (free.fits() && free.peak() <= budget) {
      TimedPlan t = time_plan(program, ctx, "ILP", train::Policy::none(), run, budget, options);
      if (t.fits()) return t;
    }
    target -= std::max<int64_t>(kGranule, free.fits() ? free.peak() - budget : 0);
  }
  return none;
}

}  // namespace mg::plan
