// Tensor's methods above its data: the autograd state read up to date through a view's base, backward,
// gradient hooks, and printing (they run ops). Tensor's math methods are in the op files.
#include <atomic>
#include <iomanip>
#include <optional>
#include <ostream>

#include <memgrad/autograd/node.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/tensor_impl.h>
#include <memgrad/ops/op_util.h>

namespace mg {

// A view's history follows its base's (detail::sync_view_history): read it up to date.
bool Tensor::requires_grad() const {
  auto* i = checked();
  detail::sync_view_history(i);
  return i->requires_grad;
}
const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  auto* i = checked();
  detail::sync_view_history(i);
  return i->grad_fn;
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  // What backward allocates (the seed, gradients made by factories such as zeros_like in a backward
  // formula) is Temporary until AccumulateGrad relabels it, not Input; a category the caller set wins.
  const bool caller_set =
      current_category(Category::Input) != Category::Input || current_category(Category::Other) != Category::Other;
  std::optional<MemoryScope> temporary;
  if (!caller_set) temporary.emplace(Category::Temporary);
  Tensor g = gradient;
  if (!g.defined()) {
    MG_CHECK(numel() == 1, AutogradError, "backward: expected a scalar output when no gradient is given, got shape ",
             shape_str(shape()), "; pass a gradient of that shape");
    NoGradGuard ng;
    g = ones(shape(), options());
  }
  MG_CHECK(g.shape() == shape(), ShapeError, "backward: expected a gradient of shape ", shape_str(shape()), ", got ",
           shape_str(g.shape()));
  MG_CHECK(g.device() == device(), DeviceError, "backward: expected a gradient on ", device(), ", got one on ",
           g.device());
  if (g.dtype() != dtype()) g = g.to(dtype());  // as in PyTorch, the seed takes the output's dtype
  autograd::run_backward({*this}, {g}, retain_graph.value_or(create_graph), create_graph);
}

Tensor& Tensor::retain_grad() {
  auto* i = checked();
  MG_CHECK(i->requires_grad, AutogradError, "retain_grad: expected a tensor that requires grad, got one that does not");
  if (!i->grad_fn || i->retains_grad) return *this;
  i->retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_;
  i->grad_fn->pre_hooks()[i->output_nr].push_back([weak](const Tensor& g) {
    if (auto self = weak.lock()) {
      NoGradGuard ng;
      MemoryScope scope(Category::Gradient);
      self->grad = self->grad ? add(Tensor(self->grad), g).impl_ptr() : g.clone().impl_ptr();
    }
    return Tensor();
  });
  return *this;
}

void Tensor::register_hook(GradHook hook) {
  auto* i = checked();
  MG_CHECK(i->requires_grad, AutogradError,
           "register_hook: expected a tensor that requires grad, got one that does not");
  if (i->grad_fn)
    i->grad_fn->pre_hooks()[i->output_nr].push_back(std::move(hook));
  else
    i->leaf_hooks.push_back(std::move(hook));
}

uint64_t Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) {
  auto* i = checked();
  MG_CHECK(!i->grad_fn && i->requires_grad, AutogradError,
           "register_post_accumulate_grad_hook: expected a leaf tensor that requires grad, got ",
           i->grad_fn ? "the output of " + std::string(i->grad_fn->name())
                      : std::string("a tensor that does not require grad"));
  static std::atomic<uint64_t> next_id{1};
  const uint64_t id = next_id++;
  i->post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(uint64_t id) {
  auto& hooks = checked()->post_accumulate_hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it)
    if (it->first == id) return void(hooks.erase(it));
}

// ---- printing

namespace {
void print_values(std::ostream& os, const Tensor& t, const std::vector<double>& v, size_t& k, int64_t d, int indent) {
  if (t.dim() == 0) {
    os << v[k++];
    return;
  }
  int64_t n = t.size(d);
  const int64_t edge = 3;                           // long dims show their first and last three entries
  bool cut = t.numel() > 1000 && n > 2 * edge + 1;  // PyTorch's summary threshold
  int64_t inner = 1;
  for (int64_t e = d + 1; e < t.dim(); ++e) inner *= t.size(e);
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == edge) {
      os << "...";
      k += size_t((n - 2 * edge) * inner);
      i = n - edge - 1;
      if (d + 1 < t.dim())
        os << ",\n" << std::string(size_t(indent + 1), ' ');
      else
        os << ", ";
      continue;
    }
    if (d + 1 == t.dim()) {
      os << v[k++];
    } else {
      print_values(os, t, v, k, d + 1, indent + 1);
    }
    if (i + 1 < n) os << (d + 1 == t.dim() ? ", " : ",\n" + std::string(size_t(indent + 1), ' '));
  }
  os << "]";
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  os << "tensor(";
  if (t.is_meta()) {
    os << "..., ";
  } else {
    std::vector<double> v = t.device().is_cuda() ? t.to(kCPU).to_vector<double>() : t.to_vector<double>();
    size_t k = 0;
    auto flags = os.flags();
    auto prec = os.precision(is_floating(t.dtype()) ? 4 : 6);
    print_values(os, t, v, k, 0, 7);
    os.flags(flags);
    os.precision(prec);
    os << ", ";
  }
  os << "shape=" << shape_str(t.shape()) << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device='" << t.device() << "'";
  if (t.grad_fn())
    os << ", grad_fn=" << t.grad_fn()->name();
  else if (t.requires_grad())
    os << ", requires_grad=true";
  return os << ")";
}

}  // namespace mg
