// Tensor's data: its layout, its bytes, its autograd flags. The methods that are ops, that run
// backward or hooks, and printing are the ops floor's (ops/tensor.cpp and the op files).
#include <memgrad/core/tensor.h>

#include <memgrad/core/dispatch.h>
#include <memgrad/core/tensor_impl.h>

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

Tensor from_blob(void* data, const Shape& shape, const TensorOptions& o, std::function<void(void*)> deleter) {
  MG_CHECK(data != nullptr || numel_of(shape) == 0, ValueError, "from_blob: expected a data pointer, got null");
  MG_CHECK(!o.device_.is_meta(), DeviceError, "from_blob: meta tensors have no memory to wrap");
  auto st = std::make_shared<Storage>(data, nbytes_of(shape, o.dtype_), o.device_, std::move(deleter));
  Tensor t = make_tensor(std::move(st), shape, contiguous_strides(shape), 0, o.dtype_);
  if (o.requires_grad_) t.requires_grad_(true);
  return t;
}

}  // namespace mg
