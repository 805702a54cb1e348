#include <memgrad/optim/optimizer.h>

#include <iomanip>
#include <ostream>
#include <sstream>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/ops.h>

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

Optimizer::Optimizer(std::vector<ParamGroup> groups, Hyperparameters defaults, std::string type)
    : type_(std::move(type)), defaults_(std::move(defaults)) {
  for (auto& g : groups) add_param_group(std::move(g));
}

void Optimizer::check_group(ParamGroup& g) {
  MG_CHECK(g.names.empty() || g.names.size() == g.params.size(), ValueError, type_,
           ": expected one name per parameter, got ", g.names.size(), " names for ", g.params.size(), " parameters");
  for (auto& [key, v] : g.options)
    MG_CHECK(defaults_.count(key), ValueError, type_, ": unknown option '", key, "' in a parameter group");
  for (auto& [key, v] : defaults_) g.options.emplace(key, v);
  MG_CHECK(g.options.at("lr") >= 0, ValueError, type_, ": expected lr >= 0, got ", g.options.at("lr"));
  size_t first = 0;
  for (auto& other : groups_) first += other.params.size();
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Tensor& p = g.params[i];
    MG_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), ValueError, type_,
             ": expected floating leaf tensors as parameters (parameter ", first + i, ")");
    for (auto& other : groups_)
      for (auto& q : other.params)
        MG_CHECK(!q.is_same(p), ValueError, type_, ": a parameter appears in more than one group");
  }
  g.names.resize(g.params.size());
  for (size_t i = 0; i < g.params.size(); ++i)
    if (g.names[i].empty()) {
      const Block* b = g.params[i].storage()->block();
      g.names[i] = b && !b->owner.empty() ? b->owner : "param." + std::to_string(first + i);
    }
}

void Optimizer::add_param_group(ParamGroup group) {
  check_group(group);
  groups_.push_back(std::move(group));
}

void Optimizer::set_lr(double lr) {
  MG_CHECK(lr >= 0, ValueError, type_, ": expected lr >= 0, got ", lr);
  for (auto& g : groups_) g.options["lr"] = lr;
}

void Optimizer::step() {
  NoGradGuard ng;
  for (auto& g : groups_) {
    std::vector<ParamUpdate> params;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      MG_CHECK(grad.device() == p.device(), DeviceError, type_, ": '", g.names[i], "' is on ", p.device(),
               " but its gradient is on ", grad.device());
      MG_CHECK(grad.dtype() == p.dtype(), DTypeError, type_, ": '", g.names[i], "' is ", p.dtype(),
               " but its gradient is ", grad.dtype());
      params.push_back({&p, &g.names[i], &state_[p.impl()]});
    }
    if (!params.empty()) update(g.options, params);
  }
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
  Tensor t;
  {
    MemoryScope scope(Category::OptimizerState, name);
    t = zeros(param.shape(), param.options());
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
  os << "optimizer state per parameter byte: " << std::fixed << std::setprecision(2) << state_per_param() << "x\n";
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
  auto number = [&](const std::string& s, const std::string& key) {
    MG_CHECK(!s.empty() && s.find_first_not_of("0123456789") == std::string::npos, ValueError, type_,
             ".load_state_dict: malformed key '", key, "'");
    return size_t(std::stoull(s));
  };
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
      const Tensor& p = *params[i].first;
      if (field == "step") {
        MG_CHECK(t.numel() == 1, ShapeError, type_, ".load_state_dict: expected a scalar step in '", key, "'");
        states[i].step = t.item<int64_t>();
        continue;
      }
      MG_CHECK(t.shape() == p.shape(), ShapeError, type_, ".load_state_dict: '", key, "' expected shape ",
               shape_str(p.shape()), ", got ", shape_str(t.shape()));
      MG_CHECK(t.dtype() == p.dtype(), DTypeError, type_, ".load_state_dict: '", key, "' expected dtype ", p.dtype(),
               ", got ", t.dtype());
      states[i].tensors.emplace_back(field, t);
    } else {
      throw ValueError(detail::str(type_, ".load_state_dict: unexpected key '", key, "'"));
    }
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
      Tensor c = empty(p->shape(), p->options());
      c.copy_(t);
      ps.tensors.emplace_back(k, c);
    }
  }
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (auto& [k, v] : options[gi]) groups_[gi].options[k] = v;
  state_ = std::move(fresh);
}

}  // namespace mg::optim
