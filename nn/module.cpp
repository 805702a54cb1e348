#include <memgrad/nn/module.h>

#include <functional>
#include <set>

#include <memgrad/core/grad_mode.h>
#include <memgrad/nn/deferred.h>
#include <memgrad/ops/ops.h>

namespace mg::nn {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

void Module::check_new_name(const std::string& name) const {
  MG_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError,
           "register: expected a non-empty name without '.', got '", name, "'");
  auto taken = [&](const auto& v) {
    for (auto& e : v)
      if (e.name == name) return true;
    return false;
  };
  bool child = false;
  for (auto& c : children_) child |= c.first == name;
  MG_CHECK(!taken(params_) && !taken(buffers_) && !child, ValueError, "register: ", type_name_,
           " already has a member named '", name, "'");
}

Module::Module(std::string type_name) : type_name_(std::move(type_name)), deferred_(DeferredInit::active()) {}

Tensor& Module::register_parameter(const std::string& name, const Shape& shape, const TensorOptions& options) {
  check_new_name(name);
  Tensor t;
  if (DeferredInit::active()) {
    t = placeholder(shape, options.dtype_);
  } else {
    MemoryScope scope(Category::Parameter, name);
    t = empty(shape, TensorOptions(options).requires_grad(false));
  }
  return register_parameter(name, t, options.requires_grad_ || is_floating(options.dtype_));
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  MG_CHECK(tensor.defined(), ValueError, "register_parameter: expected a defined tensor for '", name, "'");
  bool known = false;
  for (auto& e : params_) known |= e.name == name;
  if (!known) check_new_name(name);
  tensor.storage()->set_category(Category::Parameter);
  if (requires_grad != tensor.requires_grad()) tensor.requires_grad_(requires_grad);
  for (auto& e : params_)
    if (e.name == name) return e.tensor = tensor;
  params_.push_back({name, tensor, true});
  return params_.back().tensor;
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_new_name(name);
  buffers_.push_back({name, tensor, persistent});
  return buffers_.back().tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  MG_CHECK(m != nullptr, ValueError, "register_module: expected a module for '", name, "', got null");
  check_new_name(name);
  children_.emplace_back(name, std::move(m));
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  // `this` may not be owned by a shared_ptr (a module on the stack): alias it without owning.
  out.emplace_back("", std::shared_ptr<Module>(std::shared_ptr<Module>(), this));
  for (size_t i = 0; i < out.size(); ++i) {
    auto [path, m] = out[i];
    for (auto& [name, c] : m->children_) out.emplace_back(join(path, name), c);
  }
  return out;
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  // Depth-first in registration order, as PyTorch's named_parameters.
  std::function<void(const std::string&, const Module*)> visit = [&](const std::string& prefix, const Module* m) {
    for (auto& e : m->params_)
      if (seen.insert(e.tensor.impl()).second) out.emplace_back(join(prefix, e.name), e.tensor);
    if (recurse)
      for (auto& [name, c] : m->children_) visit(join(prefix, name), c.get());
  };
  visit("", this);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::function<void(const std::string&, const Module*)> visit = [&](const std::string& prefix, const Module* m) {
    for (auto& e : m->buffers_) out.emplace_back(join(prefix, e.name), e.tensor);
    if (recurse)
      for (auto& [name, c] : m->children_) visit(join(prefix, name), c.get());
  };
  visit("", this);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, c] : children_) c->train(on);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  for (auto& [name, p] : named_parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      p.grad().zero_();
  }
}

void Module::convert(const Device* device, const DType* dtype) {
  NoGradGuard ng;
  std::set<TensorImpl*> done;
  // Re-points the tensor's impl at converted bytes, allocated under `category` and `owner`.
  auto move = [&](const Tensor& t, Category category, const std::string& owner) {
    if (!t.defined() || !done.insert(t.impl()).second) return;
    Tensor r = t;
    if (is_placeholder(t)) {  // a deferred parameter stays a placeholder: only its dtype changes
      if (dtype && is_floating(t.dtype()) && *dtype != t.dtype()) t.set_data(placeholder(t.shape(), *dtype));
      return;
    }
    {
      MemoryScope scope(category, owner);
      if (device && *device != r.device()) r = r.to(*device);
      if (dtype && is_floating(r.dtype()) && *dtype != r.dtype()) r = r.to(*dtype);
      if (r.is_same(t)) return;
      r = r.contiguous();
    }
    t.set_data(r);
  };
  for (auto& [name, p] : named_parameters()) {
    move(p, Category::Parameter, name);
    move(p.grad(), Category::Gradient, name);
  }
  for (auto& [name, b] : named_buffers()) move(b, b.storage()->category(), name);
}

void Module::to(const Device& device) { convert(&device, nullptr); }
void Module::to(DType dtype) { convert(nullptr, &dtype); }
void Module::to(const Device& device, DType dtype) { convert(&device, &dtype); }

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, p] : named_parameters()) out[name] = p.detach();
  std::function<void(const std::string&, const Module*)> visit = [&](const std::string& prefix, const Module* m) {
    for (auto& e : m->buffers_)
      if (e.persistent) out[join(prefix, e.name)] = e.tensor.detach();
    for (auto& [name, c] : m->children_) visit(join(prefix, name), c.get());
  };
  visit("", this);
  return out;
}

void Module::load_state_dict(const StateDict& dict, bool strict) {
  StateDict mine = state_dict();
  // Validate everything first: a failure must leave the module unchanged.
  for (auto& [name, t] : mine) {
    auto it = dict.find(name);
    if (it == dict.end()) {
      MG_CHECK(!strict, ValueError, "load_state_dict: missing '", name, "' (expected shape ", shape_str(t.shape()),
               ", dtype ", t.dtype(), ")");
      continue;
    }
    const Tensor& s = it->second;
    MG_CHECK(s.defined(), ValueError, "load_state_dict: '", name, "' is an undefined tensor");
    MG_CHECK(s.shape() == t.shape(), ShapeError, "load_state_dict: '", name, "' expected shape ", shape_str(t.shape()),
             ", got ", shape_str(s.shape()));
    MG_CHECK(s.dtype() == t.dtype(), DTypeError, "load_state_dict: '", name, "' expected dtype ", t.dtype(), ", got ",
             s.dtype());
    MG_CHECK(!s.is_meta() || t.is_meta(), MetaTensorError, "load_state_dict: '", name,
             "' is a meta tensor and has no values to load");
  }
  if (strict)
    for (auto& [name, s] : dict)
      MG_CHECK(mine.count(name), ValueError, "load_state_dict: unexpected key '", name, "' (", type_name_, " has ",
               mine.size(), " entries)");
  NoGradGuard ng;
  for (auto& [name, t] : mine) {
    auto it = dict.find(name);
    if (it != dict.end()) t.copy_(it->second);
  }
}

}  // namespace mg::nn
