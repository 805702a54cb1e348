#include <memgrad/optim/optimizer.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <unordered_set>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/memory.h>
#include <memgrad/ops/ops.h>

namespace mg::optim {

namespace {
// Bytes the ledger counts for t's storage (rounded allocator blocks), as memory_stats does. A view
// into a larger block (a gradient in a data-parallel bucket, a ZeRO slice) counts its own bytes.
int64_t ledger_bytes(const Tensor& t) {
  if (!t.defined()) return 0;
  const Block* b = t.storage()->block();
  if (t.nbytes() < t.storage()->nbytes()) return int64_t(t.nbytes());
  return int64_t(b ? b->size : t.storage()->nbytes());
}
}  // namespace

std::vector<ParamGroup> as_groups(const std::vector<Tensor>& params) { return {ParamGroup{params, {}, {}}}; }
std::vector<ParamGroup> as_groups(const std::vector<std::pair<std::string, Tensor>>& named) {
  ParamGroup g;
  for (auto& [name, t] : named) g.params.push_back(t), g.names.push_back(name);
  return {g};
}

Optimizer::Optimizer(Hyperparameters defaults, std::string type)
    : type_(std::move(type)), defaults_(std::move(defaults)) {}

void Optimizer::add_param_groups(std::vector<ParamGroup> groups) {
  MG_CHECK(!groups.empty(), ValueError, type_, ": got an empty parameter list");
  for (auto& g : groups) add_param_group(std::move(g));
}

void Optimizer::check_options(const Hyperparameters& o) const {
  MG_CHECK(o.at("lr") >= 0, ValueError, type_, ": expected lr >= 0, got ", o.at("lr"));
}

void Optimizer::check_flag(const Hyperparameters& o, const char* key) const {
  MG_CHECK(o.at(key) == 0 || o.at(key) == 1, ValueError, type_, ": expected ", key, " to be 0 or 1 (a flag), got ",
           o.at(key));
}

void Optimizer::check_group(ParamGroup& g) {
  MG_CHECK(!g.params.empty(), ValueError, type_,
           ": got an empty parameter list (a group needs at least one parameter)");
  MG_CHECK(g.names.empty() || g.names.size() == g.params.size(), ValueError, type_,
           ": expected one name per parameter, got ", g.names.size(), " names for ", g.params.size(), " parameters");
  for (auto& [key, v] : g.options)
    MG_CHECK(defaults_.count(key), ValueError, type_, ": unknown option '", key, "' in a parameter group");
  for (auto& [key, v] : defaults_) g.options.emplace(key, v);
  check_options(g.options);
  std::unordered_set<const TensorImpl*> seen;  // this group's and the other groups' parameters
  size_t first = 0;
  for (auto& other : groups_) {
    first += other.params.size();
    for (auto& q : other.params) seen.insert(q.impl());
  }
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Tensor& p = g.params[i];
    MG_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), ValueError, type_,
             ": expected floating leaf tensors as parameters (parameter ", first + i, ")");
    // torch raises too: a parameter listed twice would be updated twice per step.
    MG_CHECK(seen.insert(p.impl()).second, ValueError, type_, ": parameter ", first + i,
             (g.names.empty() || g.names[i].empty() ? std::string() : " ('" + g.names[i] + "')"),
             " appears more than once (in this group or another)");
  }
  g.names.resize(g.params.size());
  for (size_t i = 0; i < g.params.size(); ++i)
    if (g.names[i].empty()) {
      const Block* b = g.params[i].storage()->block();
      g.names[i] = b && b->owner_id ? b->owner() : "param." + std::to_string(first + i);
    }
}

void Optimizer::add_param_group(ParamGroup group) {
  check_group(group);
  groups_.push_back(std::move(group));
}

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) {
    Hyperparameters o = g.options;
    o["lr"] = lr;
    check_options(o);
  }
  for (auto& g : groups_) g.options["lr"] = lr;
}

std::vector<std::string> Optimizer::state_names(const Hyperparameters&) const { return {}; }

std::vector<StateSpec> Optimizer::state_specs(const Tensor& param, const Hyperparameters& options) const {
  std::vector<StateSpec> specs;
  for (auto& name : state_names(options)) specs.push_back({name, param.shape(), param.dtype(), ""});
  return specs;
}

void Optimizer::check_state(const std::string&, const StateSpec&, const Tensor&) const {}

const Hyperparameters& Optimizer::options_of(const Tensor& param) const {
  for (auto& g : groups_)
    for (auto& p : g.params)
      if (p.impl() == param.impl()) return g.options;
  throw ValueError(detail::str(type_, ": expected one of the optimizer's parameters, got another tensor"));
}

void Optimizer::set_slice(const Tensor& param, int64_t offset, int64_t whole) {
  options_of(param);  // one of ours
  MG_CHECK(param.dim() == 1 && offset >= 0 && whole >= 0 && offset <= whole && param.numel() <= whole - offset,
           ValueError, type_, ".set_slice: expected a 1-D parameter inside [0, ", whole, ") from offset ", offset,
           ", got ", param.numel(), " elements of shape ", shape_str(param.shape()));
  whole_[param.impl()] = whole;
}

int64_t Optimizer::whole_numel(const Tensor& param) const {
  auto it = whole_.find(param.impl());
  return it == whole_.end() ? param.numel() : it->second;
}

void Optimizer::step() {
  step_if([](const Tensor&) { return true; });
}

void Optimizer::step(const Tensor& param) {
  options_of(param);  // one of ours
  MG_CHECK(param.grad().defined(), ValueError, type_, ".step(param): expected a parameter with a gradient");
  step_if([&param](const Tensor& p) { return p.impl() == param.impl(); });
}

void Optimizer::step_if(const std::function<bool(const Tensor&)>& which) {
  NoGradGuard ng;
  std::vector<std::pair<const Hyperparameters*, std::vector<ParamUpdate>>> work;  // per group
  for (auto& g : groups_) {
    std::vector<ParamUpdate> params;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      Tensor grad = p.grad();
      if (!grad.defined() || !which(p)) continue;
      MG_CHECK(grad.device() == p.device(), DeviceError, type_, ": '", g.names[i], "' is on ", p.device(),
               " but its gradient is on ", grad.device());
      MG_CHECK(grad.dtype() == p.dtype() || (p.dtype() == kFloat32 && is_half(grad.dtype())), DTypeError, type_, ": '",
               g.names[i], "' is ", p.dtype(), " but its gradient is ", grad.dtype(),
               " (expected the parameter's dtype, or a half gradient of a float32 parameter)");
      params.push_back({&p, &g.names[i], nullptr});
    }
    if (!params.empty()) work.emplace_back(&g.options, std::move(params));
  }
  // Create every missing state tensor first; if one allocation fails, drop those made here.
  std::vector<std::pair<const TensorImpl*, size_t>> before;  // tensors held before (SIZE_MAX: no entry)
  try {
    for (auto& [options, params] : work)
      for (ParamUpdate& u : params) {
        auto [it, fresh] = state_.try_emplace(u.param->impl());
        before.emplace_back(u.param->impl(), fresh ? SIZE_MAX : it->second.tensors.size());
        u.state = &it->second;
        for (auto& spec : state_specs(*u.param, *options)) state_tensor(*u.state, *u.param, *u.name, spec.name);
      }
  } catch (...) {
    for (auto& [key, n] : before)
      if (n == SIZE_MAX)
        state_.erase(key);
      else
        state_[key].tensors.resize(n);
    throw;
  }
  struct Clear {  // the factors serve one step, however it ends
    std::pair<double, double>& f;
    ~Clear() { f = {1.0, 1.0}; }
  } clear{grad_factors_};
  for (auto& [options, params] : work) {
    if (reads_half_grads()) {
      update(*options, params);  // allocates nothing
      continue;
    }
    std::vector<ParamUpdate> same;  // gradients of their parameter's dtype, in one call
    for (const ParamUpdate& u : params)
      if (u.param->grad().dtype() == u.param->dtype()) same.push_back(u);
    if (!same.empty()) update(*options, same);
    for (const ParamUpdate& u : params)
      if (u.param->grad().dtype() != u.param->dtype()) update_with_float32_grad(*options, u);
  }
}

void Optimizer::update_with_float32_grad(const Hyperparameters& options, const ParamUpdate& u) {
  const Tensor half = u.param->grad();
  Tensor g;
  {
    MemoryScope scope(Category::Gradient, *u.name);
    g = half.to(kFloat32);
    if (grad_factors_.first != 1.0) g.mul_(grad_factors_.first);
    if (grad_factors_.second != 1.0) g.mul_(grad_factors_.second);
  }
  u.param->set_grad(g);
  try {
    update(options, {u});
  } catch (...) {
    u.param->set_grad(half);
    throw;
  }
  u.param->set_grad(half);
}

void Optimizer::set_grad_factors(double first, double second) {
  MG_CHECK(std::isfinite(first) && std::isfinite(second), ValueError, type_,
           ".set_grad_factors: expected finite factors, got ", first, " and ", second);
  grad_factors_ = {first, second};
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  for (auto& g : groups_)
    for (auto& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none)
        p.set_grad(Tensor());
      else
        grad.zero_();
    }
}

Tensor& Optimizer::state_tensor(ParamState& state, const Tensor& param, const std::string& name,
                                const std::string& key) {
  for (auto& [k, t] : state.tensors)
    if (k == key) return t;
  const std::vector<StateSpec> specs = state_specs(param, options_of(param));
  auto spec = std::find_if(specs.begin(), specs.end(), [&key](const StateSpec& s) { return s.name == key; });
  MG_CHECK(spec != specs.end(), ValueError, type_, ": no state '", key, "' for '", name, "'");
  Tensor t;
  {
    MemoryScope scope(Category::OptimizerState, name);
    t = zeros(spec->shape, TensorOptions(spec->dtype).device(param.device()));
  }
  state.tensors.emplace_back(key, t);
  return state.tensors.back().second;
}

int64_t Optimizer::state_bytes(const Tensor& param) const {
  auto it = state_.find(param.impl());
  if (it == state_.end()) return 0;
  int64_t n = 0;
  for (auto& [k, t] : it->second.tensors) n += ledger_bytes(t);
  return n;
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (auto& g : groups_)
    for (auto& p : g.params) n += state_bytes(p);
  return n;
}

StateReport Optimizer::state_report() const {
  StateReport r;
  for (auto& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      StateRow row{g.names[i], p.shape(), p.dtype(), ledger_bytes(p), ledger_bytes(p.grad()), {}, 0};
      if (auto it = state_.find(p.impl()); it != state_.end())
        for (auto& [k, t] : it->second.tensors) row.state.emplace_back(k, ledger_bytes(t));
      for (auto& [k, b] : row.state) row.state_bytes += b;
      r.param_bytes += row.param_bytes, r.grad_bytes += row.grad_bytes, r.state_bytes += row.state_bytes;
      r.elements += p.numel();
      r.rows.push_back(std::move(row));
    }
  return r;
}

std::string StateReport::str() const {
  std::ostringstream os;
  size_t w = 9;
  for (auto& r : rows) w = std::max(w, r.name.size());
  os << std::left << std::setw(int(w)) << "parameter"
     << "  " << std::setw(16) << "shape" << std::setw(10) << "dtype" << std::right << std::setw(12) << "param B"
     << std::setw(12) << "grad B"
     << "  " << std::left << std::setw(36) << "state (name: bytes)" << std::right << std::setw(12) << "total B"
     << "\n";
  for (auto& r : rows) {
    std::string state;
    for (auto& [k, b] : r.state) state += (state.empty() ? "" : ", ") + k + ": " + std::to_string(b);
    if (state.empty()) state = "-";
    os << std::left << std::setw(int(w)) << r.name << "  " << std::setw(16) << shape_str(r.shape) << std::setw(10)
       << dtype_name(r.dtype) << std::right << std::setw(12) << r.param_bytes << std::setw(12) << r.grad_bytes << "  "
       << std::left << std::setw(36) << state << std::right << std::setw(12) << r.total() << "\n";
  }
  os << std::left << std::setw(int(w)) << "total"
     << "  " << std::setw(26) << "" << std::right << std::setw(12) << param_bytes << std::setw(12) << grad_bytes << "  "
     << std::left << std::setw(36) << ("state: " + std::to_string(state_bytes)) << std::right << std::setw(12)
     << param_bytes + grad_bytes + state_bytes << "\n";
  os << "optimizer state per parameter byte: " << std::fixed << std::setprecision(2) << state_per_param() << "x ("
     << state_per_element() << " B per parameter)\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const StateReport& r) { return os << r.str(); }

StateDict Optimizer::state_dict() const {
  StateDict out;
  size_t index = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (auto& [k, v] : groups_[gi].options)
      out["param_groups." + std::to_string(gi) + "." + k] = scalar_tensor(v, kFloat64);
    for (auto& p : groups_[gi].params) {
      auto it = state_.find(p.impl());
      if (it != state_.end()) {
        std::string prefix = "state." + std::to_string(index) + ".";
        out[prefix + "step"] = scalar_tensor(it->second.step, kInt64);
        for (auto& [k, t] : it->second.tensors) out[prefix + k] = t.detach();
      }
      ++index;
    }
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& dict) {
  std::vector<std::pair<const Tensor*, std::string>> params;  // parameter and its name, by index
  for (auto& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i) params.emplace_back(&g.params[i], g.names[i]);
  std::vector<Hyperparameters> options(groups_.size());
  std::map<size_t, ParamState> states;
  // An index in canonical decimal ("0", "17"; not "017", "+1" or 10^25), so each key names one slot.
  auto number = [&](const std::string& s, const std::string& key) {
    size_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    MG_CHECK(!s.empty() && ec == std::errc() && end == s.data() + s.size() && (s[0] != '0' || s.size() == 1),
             ValueError, type_, ".load_state_dict: malformed key '", key, "': expected a decimal index, got '", s, "'");
    return v;
  };
  std::multimap<size_t, std::pair<std::string, std::string>> state_keys;  // parameter -> (key, state name)
  // Parse and validate every entry before changing anything.
  for (auto& [key, t] : dict) {
    auto dot1 = key.find('.'), dot2 = key.find('.', dot1 == std::string::npos ? dot1 : dot1 + 1);
    MG_CHECK(dot1 != std::string::npos && dot2 != std::string::npos, ValueError, type_,
             ".load_state_dict: malformed key '", key, "'");
    std::string kind = key.substr(0, dot1), field = key.substr(dot2 + 1);
    size_t i = number(key.substr(dot1 + 1, dot2 - dot1 - 1), key);
    MG_CHECK(t.defined() && !t.is_meta(), ValueError, type_, ".load_state_dict: '", key, "' has no values");
    if (kind == "param_groups") {
      MG_CHECK(i < groups_.size(), ValueError, type_, ".load_state_dict: '", key, "' names group ", i,
               " but there are ", groups_.size());
      MG_CHECK(defaults_.count(field) && t.numel() == 1, ValueError, type_, ".load_state_dict: unknown option '", key,
               "'");
      options[i][field] = t.item<double>();
    } else if (kind == "state") {
      MG_CHECK(i < params.size(), ValueError, type_, ".load_state_dict: '", key, "' names parameter ", i,
               " but there are ", params.size());
      if (field == "step") {
        MG_CHECK(t.numel() == 1, ShapeError, type_, ".load_state_dict: expected a scalar step in '", key, "'");
        // A whole number >= 0, read without a cast that could overflow (a float step may come from torch).
        const double v = t.item<double>();
        MG_CHECK(v >= 0 && v < 0x1p62 && v == std::floor(v), ValueError, type_, ".load_state_dict: expected a step ",
                 ">= 0 in '", key, "', got ", v);
        states[i].step = is_floating(t.dtype()) ? int64_t(v) : t.item<int64_t>();
        continue;
      }
      state_keys.emplace(i, std::make_pair(key, field));
      states[i].tensors.emplace_back(field, t);
    } else {
      throw ValueError(detail::str(type_, ".load_state_dict: unexpected key '", key, "'"));
    }
  }
  // Each group's options as they would be after loading, held to the constructor's checks, and
  // the state tensors of its parameters limited to the ones those options keep.
  size_t first = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Hyperparameters merged = groups_[gi].options;
    for (auto& [k, v] : options[gi]) merged[k] = v;
    try {
      check_options(merged);
    } catch (const ValueError& e) {
      throw ValueError(detail::str(type_, ".load_state_dict: param_groups.", gi, ": ", e.what()));
    }
    for (size_t i = first; i < first + groups_[gi].params.size(); ++i) {
      const std::vector<StateSpec> specs = state_specs(*params[i].first, merged);
      for (auto [it, end] = state_keys.equal_range(i); it != end; ++it) {
        const std::string &key = it->second.first, &name = it->second.second;  // (a lambda cannot capture a binding)
        auto spec = std::find_if(specs.begin(), specs.end(), [&](const StateSpec& s) { return s.name == name; });
        MG_CHECK(spec != specs.end(), ValueError, type_, ".load_state_dict: unexpected key '", key,
                 "': parameter group ", gi, " keeps no state '", name, "' for '", params[i].second, "'");
        const Tensor& t = dict.at(key);
        MG_CHECK(t.shape() == spec->shape, ShapeError, type_, ".load_state_dict: '", key, "' expected shape ",
                 shape_str(spec->shape), spec->why.empty() ? "" : " (" + spec->why + ")", ", got ",
                 shape_str(t.shape()));
        MG_CHECK(t.dtype() == spec->dtype, DTypeError, type_, ".load_state_dict: '", key, "' expected dtype ",
                 spec->dtype, ", got ", t.dtype());
        check_state(key, *spec, t);
      }
    }
    first += groups_[gi].params.size();
  }
  // Copy the state into fresh tensors labelled OptimizerState, then commit.
  NoGradGuard ng;
  std::unordered_map<const TensorImpl*, ParamState> fresh;
  for (auto& [i, s] : states) {
    auto& [p, name] = params[i];
    ParamState& ps = fresh[p->impl()];
    ps.step = s.step;
    for (auto& [k, t] : s.tensors) {
      MemoryScope scope(Category::OptimizerState, name);
      Tensor c = empty(t.shape(), TensorOptions(t.dtype()).device(p->device()));
      c.copy_(t);
      ps.tensors.emplace_back(k, c);
    }
  }
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (auto& [k, v] : options[gi]) groups_[gi].options[k] = v;
  state_ = std::move(fresh);
}

}  // namespace mg::optim
