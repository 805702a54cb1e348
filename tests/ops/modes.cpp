// The cpu modes of the case list (the TEST_CASEs that MG_OP_CASES writes call these):
//   values    each case against its PyTorch fixture (tests/reference/fixtures/ops_<family>.json,
//             written by make_fixtures.py from `test_ops --dump-cases`), outputs and input
//             gradients, and against the formula or property the case states;
//   gradcheck every differentiable case in float64 against central differences;
//   meta      every case on meta and on the cpu: the same shapes, dtypes, strides and generator
//             offset, and the same ledger: bytes per category now and at the peak, and the
//             alloc/free/relabel trace with sizes, categories, owners and ops. Small cases in every
//             dtype; large ones (whose cpu run in 16 bits is slow) in their first.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <memgrad/core/memory.h>
#include <nlohmann/json.hpp>

#include "ops/compare.h"

namespace mg::optest {

namespace {

std::string context(const Case& c, DType t) { return c.name + " (" + dtype_name(t) + ")"; }

// ---- values

const nlohmann::json& fixture(const std::string& family) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(family);
  if (it == cache.end()) {
    const std::string file = std::string(MG_FIXTURES_DIR) + "/ops_" + family + ".json";
    std::ifstream in(file);
    REQUIRE_MESSAGE(in.good(), "cannot open ", file, "; run tests/reference/make_fixtures.py");
    it = cache.emplace(family, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

// A fixture tensor: float values are float32 written as the shortest decimal that reads back as the
// same float32; NaN and infinities as strings.
Tensor from_json(const nlohmann::json& j) {
  V v;
  for (const nlohmann::json& e : j.at("data")) {
    if (e.is_string())
      v.push_back(e == "nan" ? NAN : e == "inf" ? INFINITY : -INFINITY);
    else if (e.is_boolean())
      v.push_back(e.get<bool>());
    else if (e.is_number_integer())
      v.push_back(double(e.get<int64_t>()));
    else
      v.push_back(double(float(e.get<double>())));
  }
  const Shape shape = j.at("shape").get<Shape>();
  const DType t = dtype_named(j.at("dtype"));
  // tensor() reads an empty shape as 1-d: a 0-d tensor is cloned from a view of a 1-d one.
  auto shaped = [&shape](const Tensor& flat) { return shape.empty() ? flat.view({}).clone() : flat.view(shape); };
  if (!is_floating(t)) {  // exact for every int64 (a Scalar, and so scalar_tensor, holds a double)
    std::vector<int64_t> ints;
    for (const nlohmann::json& e : j.at("data")) ints.push_back(e.is_boolean() ? e.get<bool>() : e.get<int64_t>());
    return shaped(tensor(ints)).to(t);
  }
  return shaped(tensor(v, {}, kFloat64)).to(t);
}

void check_against_fixture(const Case& c, const Tensors& leaves, const Tensors& outs, const Tensors& up) {
  const nlohmann::json& cases = fixture(c.family).at("cases");
  REQUIRE_MESSAGE(cases.contains(c.name), "no fixture for case ", c.name, " in ops_", c.family,
                  ".json; run tests/reference/make_fixtures.py");
  const nlohmann::json& f = cases.at(c.name);
  REQUIRE_MESSAGE(f.at("digest") == digest(leaves, up), "the fixture of ", c.name,
                  " was computed from other inputs; run tests/reference/make_fixtures.py");
  REQUIRE(f.at("outputs").size() == outs.size());
  for (size_t i = 0; i < outs.size(); ++i)
    expect_close(outs[i], from_json(f["outputs"][i]), c.torch_tol, "output " + std::to_string(i) + " vs PyTorch");
  if (!backward(outs, up)) return;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const nlohmann::json& want = f.at("grads").at(i);
    if (want.is_null()) continue;
    expect_close(leaves[i].grad(), from_json(want), c.torch_tol,
                 "gradient of input " + std::to_string(i) + " vs PyTorch");
  }
}

void check_formula(const Case& c, const Tensors& views, const Tensors& outs) {
  std::vector<V> in;
  for (const Tensor& t : views) in.push_back(t.contiguous().to_vector<double>());
  std::vector<V> want = c.formula(in);
  REQUIRE_MESSAGE(want.size() <= outs.size(), "the formula gives ", want.size(), " outputs, the op ", outs.size());
  for (size_t i = 0; i < want.size(); ++i) {
    Tensor w = tensor(want[i], {int64_t(want[i].size())}, kFloat64);
    if (!is_floating(outs[i].dtype())) w = w.to(kInt64);
    expect_elements(outs[i], w, c.formula_tol, "output " + std::to_string(i) + " vs the formula");
  }
}

// ---- meta

// What a forward + backward did on one device: results' layouts, the ledger's counters and trace.
struct Ledger {
  std::vector<std::string> layouts;
  std::vector<std::pair<std::string, int64_t>> counters;
  std::vector<std::string> trace;
};

std::string layout(const Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream s;
  s << shape_str(t.shape()) << " " << dtype_name(t.dtype()) << " strides " << shape_str(t.strides());
  return s.str();
}

Ledger ledger_run(const Case& c, DType dtype, const Device& d) {
  Ledger l;
  const int64_t before_all = memory_stats(d).allocated;
  {
    Tensors leaves = make_leaves(c, dtype, d, true);
    // Upstream gradients need the outputs' shapes: a forward on meta gives them without values.
    Tensors up = upstream_for(c, forward(c, make_leaves(c, dtype, kMeta, true)), d);
    const MemoryStats cpu_before = memory_stats(kCPU);
    record_history(true);
    reset_peak(d);
    const MemoryStats base = memory_stats(d);
    uint64_t offset = 0;
    Tensors outs = forward(c, leaves, &offset);
    for (const Tensor& o : outs) l.layouts.push_back(layout(o));
    l.counters.push_back({"generator offset", int64_t(offset)});
    backward(outs, up);
    for (const Tensor& x : leaves) l.layouts.push_back("grad " + layout(x.grad()));
    const MemoryStats s = memory_stats(d);
    record_history(false);
    if (d.is_meta()) {
      CHECK_MESSAGE(memory_stats(kCPU).allocated == cpu_before.allocated, "meta allocated cpu memory");
      CHECK_MESSAGE(memory_stats(kCPU).num_allocs == cpu_before.num_allocs, "meta allocated cpu memory");
    }
    for (int k = 0; k < kNumCategories; ++k) {
      const std::string name = category_name(Category(k));
      l.counters.push_back({name + " now", s.by_category[size_t(k)] - base.by_category[size_t(k)]});
      l.counters.push_back({name + " peak", s.peak_by_category[size_t(k)] - base.by_category[size_t(k)]});
    }
    l.counters.push_back({"allocated", s.allocated - base.allocated});
    l.counters.push_back({"peak allocated", s.peak_allocated - base.allocated});
    for (const MemoryEvent& e : memory_history()) {
      if (e.device != d) continue;
      if (e.kind != MemoryEventKind::Alloc && e.kind != MemoryEventKind::Free && e.kind != MemoryEventKind::Relabel)
        continue;
      std::ostringstream s;
      s << event_kind_name(e.kind) << " " << e.bytes << " B (" << e.requested << " asked) "
        << category_name(e.category);
      if (e.kind == MemoryEventKind::Relabel) s << " from " << category_name(e.previous_category);
      s << " owner '" << e.owner << "' op '" << e.op << "'";
      l.trace.push_back(s.str());
    }
  }
  CHECK_MESSAGE(memory_stats(d).allocated == before_all, "bytes left on ", d, " after the case's tensors died");
  return l;
}

void expect_same_ledger(const Ledger& meta, const Ledger& cpu) {
  CHECK(meta.layouts == cpu.layouts);
  for (size_t i = 0; i < std::min(meta.layouts.size(), cpu.layouts.size()); ++i)
    CHECK_MESSAGE(meta.layouts[i] == cpu.layouts[i], "result ", i, ": meta ", meta.layouts[i], ", cpu ",
                  cpu.layouts[i]);
  for (size_t i = 0; i < cpu.counters.size(); ++i)
    CHECK_MESSAGE(meta.counters[i].second == cpu.counters[i].second, cpu.counters[i].first, ": meta ",
                  meta.counters[i].second, ", cpu ", cpu.counters[i].second);
  CHECK_MESSAGE(meta.trace.size() == cpu.trace.size(), "the trace has ", meta.trace.size(), " events on meta, ",
                cpu.trace.size(), " on the cpu");
  for (size_t i = 0; i < std::min(meta.trace.size(), cpu.trace.size()); ++i)
    if (meta.trace[i] != cpu.trace[i]) {
      CHECK_MESSAGE(meta.trace[i] == cpu.trace[i], "trace event ", i, ": meta ", meta.trace[i], ", cpu ", cpu.trace[i]);
      break;
    }
}

}  // namespace

// On every combination of the op's cpu kernel variants (matmul: openblas, eigen).
void check_values(const std::string& op) {
  for (const VariantSelection& selection : variant_selections(op_named(op).variant_ops(), DeviceType::CPU))
    for (const Case& c : op_named(op).cases()) {
      VariantGuard selected(selection, DeviceType::CPU);
      INFO("case ", c.name, std::string(selection.empty() ? "" : ", variant "), variant_label(selection));
      const bool torch = !c.large && c.no_torch.empty();
      if (!torch && !c.formula && !c.property) continue;
      Tensors leaves = make_leaves(c, kFloat32, kCPU, torch);
      Tensors views = apply_views(c, leaves);
      Tensors outs = forward(c, leaves);
      if (c.formula) check_formula(c, views, outs);
      if (c.property) {
        const std::string failure = c.property(views, outs);
        CHECK_MESSAGE(failure.empty(), failure);
      }
      if (torch) check_against_fixture(c, leaves, outs, upstream_for(c, outs, kCPU));
    }
}

void check_gradients(const std::string& op) {
  for (const Case& c : op_named(op).cases()) {
    if (c.large || !c.has_gradient()) continue;
    INFO("case ", c.name);
    Tensors leaves = make_leaves(c, kFloat64, kCPU, true);
    bool any = false;
    for (Tensor& x : leaves) {
      if (x.dtype() != kFloat64) x.requires_grad_(false);  // inputs of a fixed 16-bit dtype
      any = any || x.requires_grad();
    }
    if (!any) continue;
    Tensors outs = forward(c, leaves);
    std::vector<size_t> checked;
    bool floating = false;
    for (size_t i = 0; i < outs.size(); ++i) {
      floating = floating || is_floating(outs[i].dtype());
      if (gets_gradient(c, i, outs[i])) checked.push_back(i);
    }
    if (!floating) {  // comparisons, argmax: nothing to differentiate, and nothing recorded
      for (const Tensor& o : outs) CHECK_MESSAGE(!o.requires_grad(), "a ", o.dtype(), " output requires grad");
      continue;
    }
    REQUIRE_MESSAGE(!checked.empty(), "no floating output requires grad: the op recorded no backward");
    auto fn = [&c, checked](const Tensors& x) {
      Tensors o = forward(c, x), parts;
      for (size_t i : checked) parts.push_back(o[i].to(kFloat64).flatten());
      return parts.size() == 1 ? parts[0] : mg::cat(parts);
    };
    GradcheckResult r = gradcheck(fn, leaves, c.grad_options);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

void check_meta(const std::string& op) {
  for (const Case& c : op_named(op).cases())
    for (DType t : c.large ? std::vector<DType>{c.run_dtypes().front()} : c.run_dtypes()) {
      INFO("case ", context(c, t));
      Ledger cpu = ledger_run(c, t, kCPU);
      Ledger meta = ledger_run(c, t, kMeta);
      expect_same_ledger(meta, cpu);
    }
}

}  // namespace mg::optest

// A fixture entry whose case left the list (renamed or removed) is stale: regenerate.
TEST_CASE("the PyTorch fixtures hold exactly the cases of the list") {
  using namespace mg::optest;
  std::map<std::string, std::set<std::string>> want;  // family -> cases PyTorch checks
  for (OpDef* op : all_ops())
    for (const Case& c : op->cases())
      if (!c.large && c.no_torch.empty()) want[c.family].insert(c.name);
  for (const auto& entry : std::filesystem::directory_iterator(MG_FIXTURES_DIR)) {
    const std::string file = entry.path().filename();
    if (file.rfind("ops_", 0) != 0) continue;
    const std::string family = file.substr(4, file.size() - 4 - 5);
    INFO(file);
    CHECK_MESSAGE(want.count(family), "no cases of family ", family, " in tests/ops; run make_fixtures.py");
    std::ifstream in(entry.path());
    for (const auto& [name, value] : nlohmann::json::parse(in).at("cases").items())
      CHECK_MESSAGE(want[family].count(name), "fixture case ", name, " is not in the list; run make_fixtures.py");
  }
}
