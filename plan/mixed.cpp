#include <memgrad/plan/mixed.h>
#include <memgrad/plan/per_tensor.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

#include <memgrad/core/error.h>

namespace mg::plan {

namespace {

budget::Options mode(budget::Remat remat, budget::Offload offload, const budget::CostModel& model) {
  budget::Options b;
  b.remat = remat, b.offload = offload, b.model = model, b.cost = budget::Cost::Modeled;
  return b;
}

}  // namespace

std::vector<TimedPlan> mixed_candidates(const Program& program, const StepContext& ctx, int64_t budget,
                                        const budget::CostModel& model, const PlanOptions& options) {
  const BlockCosts c = measure_block_costs(program, ctx, options);
  std::vector<std::pair<std::string, train::Policy>> policies = {{"none", train::Policy::none()},
                                                                 {"sqrt(n)", choose_sqrt_n(c)},
                                                                 {"selective", train::Policy::selective_only()},
                                                                 {"every block", train::Policy::every_block(c.n)}};
  // The DP's choices from its least-memory one to none, at evenly spaced allocated targets.
  const int64_t lowest = predicted_peak(c, train::Policy::every_block(c.n)),
                top = predicted_peak(c, train::Policy::none());
  for (int k = 0; k <= 8; ++k) policies.push_back({"DP", choose_dp(c, lowest + (top - lowest) * k / 8)});
  std::map<std::string, bool> seen;
  std::vector<TimedPlan> out;
  for (const auto& [name, p] : policies) {
    if (!seen.emplace(p.str() + (p.selective ? " selective" : ""), true).second) continue;
    for (budget::Offload offload : {budget::Offload::None, budget::Offload::Activations}) {
      if (options.progress)
        options.progress("candidate " + name + " (" + p.str() + ")" +
                         (offload == budget::Offload::None ? "" : " with offload"));
      out.push_back(time_plan(program, ctx, name, p, mode(budget::Remat::None, offload, model), budget, options));
    }
  }
  if (ilp_available()) {
    if (options.progress) options.progress("the per-tensor plan (ILP)");
    out.push_back(choose_per_tensor(program, ctx, budget, model, options));
  }
  return out;
}

namespace {
TimedPlan fastest(const std::vector<TimedPlan>& candidates, const std::string& method, bool offload) {
  const TimedPlan* best = nullptr;
  for (const TimedPlan& t : candidates)  // "DP": checkpoint segments only, kept or recomputed as a whole
    if (t.fits() && (offload || (t.runtime.offload == budget::Offload::None && t.runtime.directives.empty())) &&
        (!best || t.predicted < best->predicted || (t.predicted == best->predicted && t.peak() < best->peak())))
      best = &t;
  if (!best) {
    TimedPlan none;
    none.method = "none fits";
    none.planned.out_of_memory = true;
    if (!candidates.empty()) none.budget = candidates.front().budget;
    return none;
  }
  TimedPlan t = *best;
  t.chosen_from = t.method;
  t.method = method;
  return t;
}
}  // namespace

TimedPlan best_mixed(const std::vector<TimedPlan>& candidates) { return fastest(candidates, "mixed", true); }
TimedPlan best_recompute(const std::vector<TimedPlan>& candidates) { return fastest(candidates, "DP", false); }

TimedPlan choose_mixed(const Program& program, const StepContext& ctx, int64_t budget, const budget::CostModel& model,
                       const PlanOptions& options) {
  return best_mixed(mixed_candidates(program, ctx, budget, model, options));
}

std::vector<TimedPlan> pareto(const Program& program, const StepContext& ctx, const std::vector<int64_t>& budgets,
                              const budget::CostModel& model, const PlanOptions& options) {
  const BlockCosts c = measure_block_costs(program, ctx, options);
  const budget::Options keep = mode(budget::Remat::None, budget::Offload::None, model);
  std::vector<TimedPlan> points;
  for (const auto& [name, p] :
       std::vector<std::pair<std::string, train::Policy>>{{"none", train::Policy::none()},
                                                          {"sqrt(n)", choose_sqrt_n(c)},
                                                          {"selective", train::Policy::selective_only()},
                                                          {"every block", train::Policy::every_block(c.n)}})
    points.push_back(time_plan(program, ctx, name, p, keep, 0, options));
  for (int64_t b : budgets) {
    const std::vector<TimedPlan> candidates = mixed_candidates(program, ctx, b, model, options);
    points.push_back(best_recompute(candidates));
    for (const TimedPlan& c : candidates)
      if (c.method == "ILP") points.push_back(c);
    points.push_back(best_mixed(candidates));
    points.push_back(time_plan(program, ctx, "dynamic", train::Policy::none(),
                               mode(budget::Remat::Dynamic, budget::Offload::None, model), b, options));
  }
  points.erase(std::remove_if(points.begin(), points.end(), [](const TimedPlan& t) { return !t.fits(); }),
               points.end());
  return points;
}

std::string pareto_table(const std::vector<TimedPlan>& points) {
  std::ostringstream os;
  char line[320];
  auto plan_of = [](const TimedPlan& t) {  // the segments, or a per-tensor plan's counts
    if (t.runtime.directives.empty()) return t.policy.str() + (t.policy.selective ? " selective" : "");
    int64_t recomputed = 0;
    for (const budget::Directive& d : t.runtime.directives)
      recomputed += d.action == budget::Directive::Action::Recompute;
    return "per tensor: " + std::to_string(int64_t(t.runtime.directives.size()) - recomputed) + " offloaded, " +
           std::to_string(recomputed) + " recomputed";
  };
  auto method = [](const TimedPlan& t) {
    return t.chosen_from.empty() ? t.method : t.method + " (" + t.chosen_from + ")";
  };
  std::snprintf(line, sizeof line, "%-20s %-22s %12s %12s %11s %11s %7s %7s %7s  %s\n", "method", "mode", "budget B",
                "peak B", "predicted", "measured", "ratio", "remats", "offl.", "segments");
  os << line;
  for (const TimedPlan& t : points) {
    if (!t.fits()) {
      std::snprintf(line, sizeof line, "%-20s %-22s %12lld %12s %11s %11s %7s %7s %7s  %s\n", method(t).c_str(),
                    t.mode().c_str(), static_cast<long long>(t.budget), "(oom)", "-", "-", "-", "-", "-",
                    plan_of(t).c_str());
      os << line;
      continue;
    }
    std::snprintf(line, sizeof line, "%-20s %-22s %12lld %12lld %9.2fms %9sms %7s %7lld %7lld  %s\n", method(t).c_str(),
                  t.mode().c_str(), static_cast<long long>(t.budget), static_cast<long long>(t.peak()),
                  t.predicted * 1e3, t.measured < 0 ? "-" : std::to_string(t.measured * 1e3).substr(0, 7).c_str(),
                  t.measured < 0 ? "-" : std::to_string(t.measured / t.predicted).substr(0, 4).c_str(),
                  static_cast<long long>(t.planned.budget.rematerializations),
                  static_cast<long long>(t.planned.budget.offloads), plan_of(t).c_str());
    os << line;
  }
  return os.str();
}

std::string pareto_svg(const std::vector<TimedPlan>& points, const std::string& title) {
  const double W = 760, H = 440, left = 70, right = 170, top = 40, bottom = 50;
  double x0 = 1e300, x1 = 0, y1 = 0;
  for (const TimedPlan& t : points) {
    x0 = std::min(x0, double(t.peak())), x1 = std::max(x1, double(t.peak()));
    y1 = std::max({y1, t.predicted, t.measured});
  }
  if (points.empty()) x0 = 0, x1 = 1, y1 = 1;
  x0 *= 0.95, x1 = x1 * 1.02 + 1, y1 *= 1.1;
  auto X = [&](double b) { return left + (b - x0) / (x1 - x0) * (W - left - right); };
  auto Y = [&](double s) { return H - bottom - s / y1 * (H - top - bottom); };
  const std::map<std::string, const char*> colors = {
      {"none", "#444"},  {"sqrt(n)", "#8c564b"}, {"selective", "#9467bd"}, {"every block", "#7f7f7f"},
      {"DP", "#1f77b4"}, {"mixed", "#2ca02c"},   {"dynamic", "#d62728"},   {"ILP", "#ff7f0e"}};
  std::ostringstream os;
  char s[400];
  std::snprintf(s, sizeof s,
                "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' font-family='sans-serif' "
                "font-size='12'>\n<rect width='100%%' height='100%%' fill='white'/>\n"
                "<text x='%g' y='22' font-size='14'>%s</text>\n",
                W, H, left, title.c_str());
  os << s;
  for (int i = 0; i <= 5; ++i) {  // axes: peak in MiB across, ms a step up
    const double b = x0 + (x1 - x0) * i / 5, sec = y1 * i / 5;
    std::snprintf(s, sizeof s,
                  "<line x1='%.1f' y1='%g' x2='%.1f' y2='%g' stroke='#eee'/><text x='%.1f' y='%g' "
                  "text-anchor='middle'>%.1f</text>\n<line x1='%g' y1='%.1f' x2='%g' y2='%.1f' stroke='#eee'/><text "
                  "x='%g' y='%.1f' text-anchor='end'>%.0f</text>\n",
                  X(b), top, X(b), H - bottom, X(b), H - bottom + 16, b / 1048576, left, Y(sec), W - right, Y(sec),
                  left - 6, Y(sec) + 4, sec * 1e3);
    os << s;
  }
  std::snprintf(s, sizeof s,
                "<text x='%g' y='%g' text-anchor='middle'>planned peak (MiB)</text>\n<text x='16' y='%g' "
                "transform='rotate(-90 16 %g)' text-anchor='middle'>step time (ms)</text>\n",
                (left + W - right) / 2, H - 12, (top + H - bottom) / 2, (top + H - bottom) / 2);
  os << s;
  double legend = top + 10;
  for (const auto& [method, color] : colors) {
    std::vector<const TimedPlan*> own;
    for (const TimedPlan& t : points)
      if (t.method == method) own.push_back(&t);
    if (own.empty()) continue;
    std::sort(own.begin(), own.end(), [](auto* a, auto* b) { return a->peak() < b->peak(); });
    os << "<polyline fill='none' stroke='" << color << "' points='";
    for (auto* t : own) os << X(double(t->peak())) << "," << Y(t->predicted) << " ";
    os << "'/>\n";
    for (auto* t : own) {
      std::snprintf(s, sizeof s, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s'><title>%s, %s: predicted %.2f ms",
                    X(double(t->peak())), Y(t->predicted), color, method.c_str(), t->mode().c_str(),
                    t->predicted * 1e3);
      os << s;
      if (t->measured >= 0) {
        std::snprintf(s, sizeof s,
                      ", measured %.2f ms</title></circle>\n<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' "
                      "stroke='%s' stroke-dasharray='2,2'/><circle cx='%.1f' cy='%.1f' r='4' fill='none' "
                      "stroke='%s'/>\n",
                      t->measured * 1e3, X(double(t->peak())), Y(t->predicted), X(double(t->peak())), Y(t->measured),
                      color, X(double(t->peak())), Y(t->measured), color);
        os << s;
      } else {
        os << "</title></circle>\n";
      }
    }
    std::snprintf(s, sizeof s, "<circle cx='%g' cy='%g' r='4' fill='%s'/><text x='%g' y='%g'>%s</text>\n",
                  W - right + 16, legend, color, W - right + 26, legend + 4, method.c_str());
    os << s;
    legend += 18;
  }
  std::snprintf(s, sizeof s,
                "<circle cx='%g' cy='%g' r='4' fill='none' stroke='#000'/><text x='%g' y='%g'>measured</text>\n"
                "<circle cx='%g' cy='%g' r='4' fill='#000'/><text x='%g' y='%g'>predicted</text>\n</svg>\n",
                W - right + 16, legend + 8, W - right + 26, legend + 12, W - right + 16, legend + 26, W - right + 26,
                legend + 30);
  os << s;
  return os.str();
}

}  // namespace mg::plan
