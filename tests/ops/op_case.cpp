// The case list's machinery shared by every program that runs it (tests, gpu tests, benchmark):
// the registry, the inputs' values, one forward and backward, and the dump for make_fixtures.py.
#include "ops/op_case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include <memgrad/autograd/node.h>
#include <memgrad/core/cuda.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/variants.h>
#include <nlohmann/json.hpp>

namespace mg::optest {

Tol tol_for(DType t) {
  switch (t) {
    case kFloat16:
      return {4e-3, 2e-3};
    case kBFloat16:
      return {3e-2, 1.6e-2};
    case kFloat64:
      return {1e-10, 1e-12};
    default:
      return {2e-5, 2e-6};
  }
}

// ---- inputs

Input Input::with(View v) const {
  Input r = *this;
  r.views.push_back(std::move(v));
  return r;
}
Input Input::as(DType t) const {
  Input r = *this;
  r.dtype = t;
  return r;
}
Input Input::map(std::function<double(size_t, double)> f) const {
  Input r = *this;
  r.edit = std::move(f);
  return r;
}
Input Input::no_grad() const {
  Input r = *this;
  r.grad = false;
  return r;
}

namespace {
Input filled(Input::Fill f, const Shape& s, double lo, double hi, V values = {}, std::optional<DType> dtype = {}) {
  Input in;
  in.fill = f, in.shape = s, in.lo = lo, in.hi = hi, in.values = std::move(values), in.dtype = dtype;
  return in;
}
}  // namespace

Input U(const Shape& s, double lo, double hi) { return filled(Input::Fill::Uniform, s, lo, hi); }
Input Away(const Shape& s, double lo, double hi) { return filled(Input::Fill::Away, s, lo, hi); }
Input Ints(const Shape& s, int64_t lo, int64_t hi) {
  return filled(Input::Fill::Ints, s, double(lo), double(hi), {}, kInt64);
}
Input Bools(const Shape& s) { return filled(Input::Fill::Bools, s, 0, 0, {}, kBool); }
Input Grid(const Shape& s, const V& values) { return filled(Input::Fill::Grid, s, 0, 0, values); }
Input Vals(const V& data) { return Vals(data, {int64_t(data.size())}); }
Input Vals(const V& data, const Shape& s) { return filled(Input::Fill::Values, s, 0, 0, data); }
Input IntVals(const V& data) { return IntVals(data, {int64_t(data.size())}); }
Input IntVals(const V& data, const Shape& s) { return filled(Input::Fill::Values, s, 0, 0, data, kInt64); }

namespace {

// FNV-1a: a stable hash of a name (std::hash is not the same everywhere).
uint64_t fnv1a(const std::string& s, uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ULL;
  return h;
}

// splitmix64: a small generator whose sequence is defined here, not by a standard library.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * double(next() >> 11) * 0x1.0p-53; }
};

// Floating values are rounded to float32, so a fixture (written in float32) holds them exactly.
V values_of(const Input& in, const std::string& seed) {
  const size_t n = size_t(numel_of(in.shape));
  if (in.fill == Input::Fill::Values) {
    MG_CHECK(in.values.size() == n, ValueError, "case input: ", in.values.size(), " values for shape ",
             shape_str(in.shape));
    return in.values;
  }
  Rng rng{fnv1a(seed)};
  V v(n);
  for (size_t i = 0; i < n; ++i) {
    double& x = v[i];
    switch (in.fill) {
      case Input::Fill::Uniform:
        x = rng.uniform(in.lo, in.hi);
        break;
      case Input::Fill::Away:
        x = rng.uniform(in.lo, in.hi) * ((rng.next() & 1) ? 1 : -1);
        break;
      case Input::Fill::Ints:
        x = in.lo + double(rng.next() % uint64_t(in.hi - in.lo));
        break;
      case Input::Fill::Bools:
        x = double(rng.next() & 1);
        break;
      case Input::Fill::Grid:
        x = in.values[size_t(rng.next() % in.values.size())];
        break;
      case Input::Fill::Values:
        break;
    }
    if (in.edit) x = in.edit(i, x);
    if (in.floating()) x = double(float(x));
  }
  return v;
}

V input_values(const Case& c, size_t i) { return values_of(c.inputs[i], c.name + "/" + std::to_string(i)); }

DType dtype_of_input(const Input& in, DType run) { return in.dtype ? *in.dtype : run; }

// tensor() reads an empty shape as 1-d: a 0-d tensor is cloned from a view of a 1-d one.
Tensor tensor_of(const V& v, const Shape& s, DType t) {
  return (s.empty() ? tensor(v, {1}, kFloat64).view({}).clone() : tensor(v, s, kFloat64)).to(t);
}

}  // namespace

// ---- cases

Case& Case::gradcheck_options(double eps, double atol, double rtol) {
  grad_options.eps = eps, grad_options.atol = atol, grad_options.rtol = rtol;
  return *this;
}

Case& Case::cuda_tolerance(double factor) {
  cuda_tol = [factor](DType t, const std::string&) { return scaled(tol_for(t), factor); };
  return *this;
}

Formula each(std::function<double(double)> f) {
  return [f](const std::vector<V>& in) {
    V out;
    for (double x : in.at(0)) out.push_back(f(x));
    return std::vector<V>{out};
  };
}

Property outputs_of_dtype(DType t) {
  return [t](const Tensors&, const Tensors& out) -> std::string {
    for (const Tensor& o : out)
      if (o.dtype() != t) return detail::str("an output of dtype ", o.dtype(), ", expected ", t);
    return "";
  };
}

Case& Case::expect(std::vector<V> outputs, Tol tol) {
  formula = [outputs](const std::vector<V>&) { return outputs; };
  formula_tol = tol;
  return *this;
}

std::vector<DType> Case::run_dtypes() const {
  for (const Input& in : inputs)
    if (!in.dtype) return dtypes;
  return {kFloat32};  // every input has its own dtype: one run
}

bool Case::has_gradient() const {
  if (!no_grad.empty()) return false;
  for (const Input& in : inputs)
    if (in.floating() && in.grad.value_or(true)) return true;
  return false;
}

// ---- registry

namespace {
std::map<std::string, std::unique_ptr<OpDef>>& registry() {
  static std::map<std::string, std::unique_ptr<OpDef>> r;
  return r;
}

// "tests/ops/cases_norm.cpp" -> "norm"
std::string family_of(const char* file) {
  std::string f = file;
  size_t slash = f.find_last_of('/');
  f = f.substr(slash == std::string::npos ? 0 : slash + 1);
  if (f.rfind("cases_", 0) == 0) f = f.substr(6);
  return f.substr(0, f.find('.'));
}
}  // namespace

OpDef::OpDef(std::string name, const char* file) : name_(std::move(name)), family_(family_of(file)) {
  variant_ops_ = {name_};
}

const std::deque<Case>& OpDef::cases() {
  if (!built_) {
    built_ = true;
    build();
    MG_CHECK(fn_, ValueError, "op ", name_, ": its cases give no call()");
  }
  return cases_;
}

Case& OpDef::add_case(std::string name, std::vector<Input> inputs, Args args) {
  Case c = defaults_;
  c.name = std::move(name), c.op = name_, c.family = family_, c.inputs = std::move(inputs), c.args = std::move(args);
  cases_.push_back(std::move(c));
  return cases_.back();
}

bool register_op(std::unique_ptr<OpDef> op) {
  std::string name = op->name();
  MG_CHECK(registry().emplace(name, std::move(op)).second, ValueError, "op ", name, " is in the case list twice");
  return true;
}

OpDef& op_named(const std::string& name) {
  auto it = registry().find(name);
  MG_CHECK(it != registry().end(), ValueError, "no op named ", name, " in the case list");
  return *it->second;
}

std::vector<OpDef*> all_ops() {
  std::vector<OpDef*> ops;
  for (auto& [name, op] : registry()) ops.push_back(op.get());
  std::stable_sort(ops.begin(), ops.end(), [](OpDef* a, OpDef* b) { return a->family() < b->family(); });
  return ops;
}

// ---- arguments

namespace {
const Arg& arg(const Args& a, const char* key, std::initializer_list<Arg::Kind> kinds) {
  auto it = a.find(key);
  MG_CHECK(it != a.end(), ValueError, "case argument ", key, ": missing");
  for (Arg::Kind k : kinds)
    if (it->second.kind == k) return it->second;
  throw ValueError(detail::str("case argument ", key, ": of another kind"));
}
}  // namespace

int64_t int_arg(const Args& a, const char* key) { return arg(a, key, {Arg::Kind::Int}).i; }
double float_arg(const Args& a, const char* key) {
  const Arg& v = arg(a, key, {Arg::Kind::Float, Arg::Kind::Int});
  return v.kind == Arg::Kind::Int ? double(v.i) : v.f;
}
bool bool_arg(const Args& a, const char* key) { return arg(a, key, {Arg::Kind::Bool}).b; }
const std::string& string_arg(const Args& a, const char* key) { return arg(a, key, {Arg::Kind::String}).s; }
std::vector<int64_t> ints_arg(const Args& a, const char* key) { return arg(a, key, {Arg::Kind::Ints}).ints; }
bool null_arg(const Args& a, const char* key) {
  return arg(a, key, {Arg::Kind::Null, Arg::Kind::Int}).kind == Arg::Kind::Null;
}
Scalar scalar_arg(const Args& a, const char* key) {
  const Arg& v = arg(a, key, {Arg::Kind::Bool, Arg::Kind::Int, Arg::Kind::Float});
  return v.kind == Arg::Kind::Bool ? Scalar(v.b) : v.kind == Arg::Kind::Int ? Scalar(v.i) : Scalar(v.f);
}
std::optional<Scalar> optional_scalar_arg(const Args& a, const char* key) {
  if (arg(a, key, {Arg::Kind::Null, Arg::Kind::Bool, Arg::Kind::Int, Arg::Kind::Float}).kind == Arg::Kind::Null)
    return std::nullopt;
  return scalar_arg(a, key);
}
Tensor optional_input(const Tensors& x, size_t i) { return i < x.size() ? x[i] : Tensor(); }
DType dtype_named(const std::string& name) {
  for (DType t : {kBool, kUInt8, kInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64})
    if (name == dtype_name(t)) return t;
  throw ValueError("unknown dtype name " + name);
}

// ---- running a case

Tensors make_leaves(const Case& c, DType dtype, const Device& device, bool grads) {
  const bool differentiate = grads && c.has_gradient();
  MemoryScope inputs(Category::Input);  // as a user's tensors, whatever conversions made them
  Tensors leaves;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Input& in = c.inputs[i];
    Tensor t = tensor_of(input_values(c, i), in.shape, dtype_of_input(in, dtype)).to(device);
    if (differentiate && in.floating() && in.grad.value_or(true)) t.requires_grad_();
    leaves.push_back(t);
  }
  return leaves;
}

Tensors apply_views(const Case& c, const Tensors& leaves) {
  Tensors out;
  for (size_t i = 0; i < leaves.size(); ++i) {
    Tensor t = leaves[i];
    for (const View& v : c.inputs[i].views) {
      const auto& a = v.arg;
      if (v.kind == "transpose")
        t = t.transpose(a.at(0), a.at(1));
      else if (v.kind == "permute")
        t = t.permute(a);
      else if (v.kind == "slice")
        t = t.slice(a.at(0), a.at(1), a.at(2), a.at(3));
      else if (v.kind == "select")
        t = t.select(a.at(0), a.at(1));
      else
        t = t.expand(a);
    }
    out.push_back(t);
  }
  return out;
}

Tensors forward(const Case& c, const Tensors& leaves, uint64_t* offset) {
  GeneratorStateGuard keep;
  manual_seed(fnv1a(c.name));
  Tensors out = op_named(c.op).fn()(apply_views(c, leaves), c.args);
  if (offset) *offset = default_generator().offset();
  return out;
}

bool gets_gradient(const Case& c, size_t i, const Tensor& o) {
  bool named =
      c.grad_outputs.empty() || std::find(c.grad_outputs.begin(), c.grad_outputs.end(), i) != c.grad_outputs.end();
  return named && o.defined() && is_floating(o.dtype()) && o.requires_grad();
}

Tensors upstream_for(const Case& c, const Tensors& outputs, const Device& device) {
  Tensors up(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    if (!gets_gradient(c, i, o)) continue;
    Rng rng{fnv1a(c.name + "/grad/" + std::to_string(i))};
    V v(size_t(o.numel()));
    for (double& x : v) x = double(float(rng.uniform(-1, 1)));
    up[i] = tensor_of(v, o.shape(), o.dtype()).to(device);
  }
  return up;
}

bool backward(const Tensors& outputs, const Tensors& upstream) {
  autograd::TensorList roots, grads;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (upstream[i].defined()) roots.push_back(outputs[i]), grads.push_back(upstream[i]);
  if (roots.empty()) return false;
  autograd::run_backward(roots, grads, false);
  return true;
}

std::vector<VariantSelection> variant_selections(const std::vector<std::string>& kernels, DeviceType d) {
  std::vector<VariantSelection> all{{}};
  for (const std::string& k : kernels) {
    std::vector<std::string> variants = kernel_variants(d, k);
    if (variants.empty()) continue;
    std::vector<VariantSelection> next;
    for (const VariantSelection& s : all)
      for (const std::string& v : variants) {
        next.push_back(s);
        next.back().push_back({k, v});
      }
    all = std::move(next);
  }
  return all;
}

VariantGuard::VariantGuard(const VariantSelection& s, DeviceType d) : selection_(s), device_(d) {
  for (const auto& [kernel, variant] : s) set_kernel_variant(d, kernel, variant);
}
VariantGuard::~VariantGuard() {
  for (const auto& [kernel, variant] : selection_)
    set_kernel_variant(device_, kernel, kernel_variants(device_, kernel).front());
}

std::string variant_label(const VariantSelection& s) {
  std::string l;
  for (const auto& [kernel, variant] : s) l += (l.empty() ? "" : "+") + variant;
  return l;
}

// ---- the dump for make_fixtures.py

namespace {

// Values as JSON numbers; NaN and infinities, which JSON lacks, as strings.
nlohmann::json json_values(const V& v, DType t) {
  nlohmann::json data = nlohmann::json::array();
  for (double x : v) {
    if (t == kBool)
      data.push_back(x != 0);
    else if (!is_floating(t))
      data.push_back(int64_t(x));
    else if (std::isnan(x))
      data.push_back("nan");
    else if (std::isinf(x))
      data.push_back(x > 0 ? "inf" : "-inf");
    else
      data.push_back(x);
  }
  return data;
}

nlohmann::json args_json(const Args& args) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, v] : args) {
    switch (v.kind) {
      case Arg::Kind::Null:
        j[key] = nullptr;
        break;
      case Arg::Kind::Bool:
        j[key] = v.b;
        break;
      case Arg::Kind::Int:
        j[key] = v.i;
        break;
      case Arg::Kind::Float:
        j[key] = v.f;
        break;
      case Arg::Kind::String:
        j[key] = v.s;
        break;
      case Arg::Kind::Ints:
        j[key] = v.ints;
        break;
    }
  }
  return j;
}

nlohmann::json tensor_json(const Tensor& t) {
  return {
      {"shape", t.shape()}, {"dtype", dtype_name(t.dtype())}, {"data", json_values(t.to_vector<double>(), t.dtype())}};
}

// What the fixture is computed from: the float32 run's leaves and upstream gradients.
struct FixtureRun {
  Tensors leaves, upstream;
};
FixtureRun fixture_run(const Case& c) {
  FixtureRun r;
  r.leaves = make_leaves(c, kFloat32, kCPU, true);
  r.upstream = upstream_for(c, forward(c, r.leaves), kCPU);
  return r;
}

uint64_t hash_tensor(const Tensor& t, uint64_t h) {
  h = fnv1a(std::string(dtype_name(t.dtype())) + shape_str(t.shape()), h);
  for (double x : t.to_vector<double>()) {
    uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    for (int b = 0; b < 8; ++b) h = (h ^ ((bits >> (8 * b)) & 0xff)) * 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::string digest(const Tensors& leaves, const Tensors& upstream) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const Tensor& t : leaves) h = hash_tensor(t, h);
  for (const Tensor& t : upstream) h = t.defined() ? hash_tensor(t, h) : fnv1a("none", h);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

nlohmann::json dump_cases() {
  nlohmann::json cases = nlohmann::json::array();
  for (OpDef* op : all_ops())
    for (const Case& c : op->cases()) {
      if (c.large || !c.no_torch.empty()) continue;
      FixtureRun r;
      try {
        r = fixture_run(c);
      } catch (const Error& e) {
        throw ValueError(detail::str("case ", c.name, ": ", e.what()));
      }
      nlohmann::json inputs = nlohmann::json::array(), up = nlohmann::json::array();
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        nlohmann::json in = tensor_json(r.leaves[i]);
        in["follows"] = !c.inputs[i].dtype.has_value();  // the floating dtype of the run
        in["requires_grad"] = r.leaves[i].requires_grad();
        in["view"] = nlohmann::json::array();
        for (const View& v : c.inputs[i].views) in["view"].push_back({v.kind, v.arg});
        inputs.push_back(in);
      }
      for (const Tensor& u : r.upstream) up.push_back(u.defined() ? tensor_json(u) : nlohmann::json());
      cases.push_back({{"name", c.name},
                       {"op", c.op},
                       {"family", c.family},
                       {"args", args_json(c.args)},
                       {"inputs", inputs},
                       {"grad_outputs", up},
                       {"digest", digest(r.leaves, r.upstream)},
                       {"tolerance", {{"rtol", c.torch_tol.rtol}, {"atol", c.torch_tol.atol}}}});
    }
  return {{"cases", cases}};
}

}  // namespace mg::optest
