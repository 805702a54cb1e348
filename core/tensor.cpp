#include <memgrad/core/tensor.h>

#include <atomic>

#include <memgrad/core/tensor_impl.h>

#include <iomanip>
#include <optional>
#include <ostream>

#include <memgrad/autograd/node.h>
#include <memgrad/core/dispatch.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/ops.h>
#include <memgrad/core/ops/op_util.h>

namespace mg {

Tensor make_tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

namespace {
// The bytes of a contiguous tensor of `shape`, with its row-major strides stored in `strides`.
size_t contiguous_layout(const Shape& shape, DType dtype, Strides& strides) {
  for (auto d : shape) MG_CHECK(d >= 0, ShapeError, "empty: expected non-negative sizes, got ", shape_str(shape));
  const int64_t n = numel_of(shape);
  strides = contiguous_strides(shape);  // a zero-size tensor's strides can overflow where its count does not
  const size_t item = dtype_size(dtype);
  MG_CHECK(size_t(n) <= SIZE_MAX / item, ShapeError, "empty: shape ", shape_str(shape), " of ", dtype,
           " needs 2^64 bytes or more");
  return size_t(n) * item;
}
}  // namespace

size_t nbytes_of(const Shape& shape, DType dtype) {
  Strides strides;
  return contiguous_layout(shape, dtype, strides);
}

Tensor empty_with(Shape shape, DType dtype, const Device& device, Category fallback) {
  Strides strides;
  auto st = std::make_shared<Storage>(device, contiguous_layout(shape, dtype, strides), fallback);
  return make_tensor(std::move(st), std::move(shape), std::move(strides), 0, dtype);
}

int64_t Tensor::size(int64_t dim) const {
  MG_CHECK(this->dim() > 0, IndexError, "size: a 0-d tensor has no dims, asked for dim ", dim);
  return shape()[size_t(wrap_dim(dim, this->dim(), "size"))];
}

int64_t Tensor::stride(int64_t dim) const {
  MG_CHECK(this->dim() > 0, IndexError, "stride: a 0-d tensor has no dims, asked for dim ", dim);
  return strides()[size_t(wrap_dim(dim, this->dim(), "stride"))];
}

TensorImpl* Tensor::checked() const {
  if (!impl_) throw ValueError("Tensor: expected a defined tensor, got an undefined one");
  return impl_.get();
}
const Shape& Tensor::shape() const { return checked()->shape; }
const Strides& Tensor::strides() const { return checked()->strides; }
DType Tensor::dtype() const { return checked()->dtype; }
Device Tensor::device() const { return checked()->storage->device(); }
int64_t Tensor::storage_offset() const { return checked()->offset; }
const std::shared_ptr<Storage>& Tensor::storage() const { return checked()->storage; }
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

void Tensor::set_data(const Tensor& src) const {
  TensorImpl *i = checked(), *s = src.checked();
  i->storage = s->storage;
  i->shape = s->shape;
  i->strides = s->strides;
  i->offset = s->offset;
  i->dtype = s->dtype;
  i->view_base.reset();
}

bool Tensor::is_contiguous() const {
  auto& s = shape();
  auto& st = strides();
  int64_t expect = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != expect) return false;
    expect *= s[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  auto* i = checked();
  const Device& d = i->storage->device();
  MG_CHECK(!d.is_meta(), MetaTensorError, "data: a meta tensor has a shape ", shape_str(i->shape), " and dtype ",
           i->dtype, " but no values; run on cpu or cuda to read values");
  MG_CHECK(!d.is_cuda(), DeviceError, "data: expected a cpu tensor, got one on ", d,
           "; copy it with .to(mg::kCPU) first");
  return static_cast<char*>(i->storage->data()) + i->offset * int64_t(dtype_size(i->dtype));
}

namespace detail {
double load_as_double(const void* p, DType t) {
  double r = 0;
  dispatch(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    r = double(load(*static_cast<const T*>(p)));
  });
  return r;
}
void store_from_double(void* p, DType t, double v) {
  dispatch(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    *static_cast<T*>(p) = store<T>(v);
  });
}
}  // namespace detail

// ---- autograd

Tensor& Tensor::requires_grad_(bool r) {
  auto* i = checked();
  MG_CHECK(!r || is_floating(i->dtype), DTypeError,
           "requires_grad_: only floating tensors can require gradients, got dtype ", i->dtype);
  MG_CHECK(r || !i->grad_fn, AutogradError,
           "requires_grad_: expected a leaf to switch off requires_grad, got a tensor computed by ",
           "an op; use detach() instead");
  i->requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const {
  auto& g = checked()->grad;
  return g ? Tensor(g) : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  auto* i = checked();
  if (g.defined())
    MG_CHECK(g.shape() == i->shape, ShapeError, "set_grad: expected a gradient of shape ", shape_str(i->shape),
             ", got ", shape_str(g.shape()));
  i->grad = g.impl_ptr();
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

Tensor Tensor::detach() const {
  auto* i = checked();
  return make_tensor(i->storage, i->shape, i->strides, i->offset, i->dtype);
}

Tensor& Tensor::detach_() {
  auto* i = checked();
  i->grad_fn.reset();
  i->requires_grad = false;
  i->view_base.reset();
  return *this;
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
