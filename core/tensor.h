// Tensor: a handle to shape, strides and an offset into shared Storage, plus autograd state.
// Copying a Tensor copies the handle; views share storage with their base.
#pragma once
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <memgrad/core/device.h>
#include <memgrad/core/dtype.h>
#include <memgrad/core/error.h>
#include <memgrad/core/scalar.h>
#include <memgrad/core/shape.h>
#include <memgrad/core/storage.h>

namespace mg {

namespace autograd {
class Node;
}
class Tensor;
using GradHook = std::function<Tensor(const Tensor&)>;  // returns a replacement or undefined
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

struct TensorOptions {
  DType dtype_ = kFloat32;
  Device device_ = kCPU;
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions& dtype(DType t) { return dtype_ = t, *this; }
  TensorOptions& device(Device d) { return device_ = d, *this; }
  TensorOptions& requires_grad(bool r = true) { return requires_grad_ = r, *this; }
};

// The tensor's state (storage, shape, strides, autograd links) lives in TensorImpl, private to
// memgrad (core/tensor_impl.h): users reach it only through Tensor's methods. impl() is for
// identity (a key in maps) and for the library's own internals.
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata
  const Shape& shape() const;
  const Shape& sizes() const { return shape(); }
  int64_t size(int64_t dim) const;
  const Strides& strides() const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return int64_t(shape().size()); }
  int64_t numel() const { return numel_of(shape()); }
  DType dtype() const;
  Device device() const;
  int64_t storage_offset() const;
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_meta() const { return device().is_meta(); }
  const std::shared_ptr<Storage>& storage() const;
  uint64_t version() const { return storage()->version(); }
  TensorOptions options() const { return TensorOptions().dtype(dtype()).device(device()); }

  // ---- values (CPU tensors; meta tensors raise MetaTensorError, CUDA ones DeviceError)
  void* raw_data() const;  // pointer to the first element
  template <class T>
  T* data_ptr() const;
  template <class T>
  T item() const;  // a one-element tensor's value, converted to T
  template <class T>
  std::vector<T> to_vector() const;  // all elements in row-major order, converted to T

  // ---- autograd
  bool requires_grad() const;
  Tensor& requires_grad_(bool r = true);
  bool is_leaf() const { return !grad_fn(); }
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  Tensor grad() const;                   // undefined until a backward pass reaches this leaf
  void set_grad(const Tensor& g) const;  // set or clear (undefined) the .grad
  // Computes gradients of this tensor w.r.t. the leaves, accumulated into their .grad; `gradient`
  // defaults to 1 for scalars. retain_graph (default: create_graph) keeps the saved tensors for
  // another backward; create_graph records the backward pass itself, so the gradients (and .grad)
  // can be differentiated again: gradient penalties, Hessian-vector products. For gradients
  // returned rather than accumulated, see autograd::grad (autograd/node.h).
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  Tensor detach() const;  // shares storage, no history
  // Points this tensor at `src`'s storage, shape, strides and dtype, keeping its own identity and
  // autograd state (libtorch's set_data): how a module moves its parameters to another device or dtype.
  void set_data(const Tensor& src) const;
  Tensor& detach_();
  Tensor& retain_grad();  // keep .grad on a non-leaf
  // `hook(grad)` runs when this tensor's gradient is computed; a defined result replaces it.
  void register_hook(GradHook hook);
  // On a leaf: `hook(leaf)` runs each time a backward pass has accumulated into leaf.grad() (once per
  // backward, after all of that pass's contributions), as torch's register_post_accumulate_grad_hook.
  // Data parallelism uses it to reduce gradients while backward still runs. Returns an id for removal.
  uint64_t register_post_accumulate_grad_hook(PostAccumulateGradHook hook);
  void remove_post_accumulate_grad_hook(uint64_t id);  // unknown ids are ignored

  // ---- views (no copies; share storage)
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;  // a view when strides allow, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // ---- copies and conversions
  Tensor contiguous() const;  // self when already contiguous
  Tensor clone() const;
  Tensor to(DType t) const;  // self when already that dtype
  Tensor to(const Device& d) const;
  Tensor to(const Device& d, DType t) const;

  // ---- math (see ops.h for the full list)
  Tensor sum(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // values, indices
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor logsumexp(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor cumsum(int64_t dim) const;
  Tensor cumprod(int64_t dim) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;  // values, indices
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor flip(const std::vector<int64_t>& dims) const;
  // Tiles the tensor: repeats[d] copies along dim d (leading repeats add dims), as torch's repeat.
  Tensor repeat(const std::vector<int64_t>& repeats) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor pow(const Scalar& p) const;
  Tensor matmul(const Tensor& o) const;

  // ---- in-place (bump the version counter)
  Tensor& add_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& s);
  Tensor& sub_(const Tensor& o);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(const Scalar& s);
  Tensor& div_(const Tensor& o);
  Tensor& div_(const Scalar& s);
  Tensor& relu_();
  Tensor& clamp_(const Scalar& lo, const Scalar& hi);
  Tensor& zero_();
  Tensor& fill_(const Scalar& v);
  Tensor& copy_(const Tensor& src);  // broadcasts src; converts dtype; crosses devices
  Tensor& masked_fill_(const Tensor& mask, const Scalar& v);
  // Writes (adds) src[p] at position p with its `dim` coordinate replaced by index[p] (see mg::scatter).
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& scatter_(int64_t dim, const Tensor& index, const Scalar& value);
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src);
  // Adds alpha * source[..., k, ...] into slice index[k] along `dim` (see mg::index_add).
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha = 1);

 private:
  TensorImpl* checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Creates a tensor header over `storage` (used by ops and factories).
Tensor make_tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype);
// Bytes of a contiguous tensor of `shape` and `dtype`. Throws ShapeError naming the shape when a
// size is negative or the element count or byte count overflows; a count too large for any device
// is left to the allocator, which raises OutOfMemoryError.
size_t nbytes_of(const Shape& shape, DType dtype);
// A fresh contiguous tensor allocated under the scope's category, else `fallback`.
Tensor empty_with(Shape shape, DType dtype, const Device& device, Category fallback);
// Wraps memory the caller owns, without copying; `deleter` runs when the last view dies.
Tensor from_blob(void* data, const Shape& shape, const TensorOptions& o = {}, std::function<void(void*)> deleter = {});

namespace detail {
double load_as_double(const void* p, DType t);
void store_from_double(void* p, DType t, double v);
// Element at p converted to T; int64 is read exactly (beyond 2^53 a double would round it).
template <class T>
T load_as(const void* p, DType t) {
  if (t == kInt64) return T(*static_cast<const int64_t*>(p));
  return T(load_as_double(p, t));
}
}  // namespace detail

template <class T>
T* Tensor::data_ptr() const {
  MG_CHECK(dtype_of<T>::value == dtype(), DTypeError, "data_ptr: expected the tensor's dtype ", dtype(),
           ", got a request for ", dtype_of<T>::value);
  return static_cast<T*>(raw_data());
}

template <class T>
T Tensor::item() const {
  MG_CHECK(numel() == 1, ShapeError, "item: expected a tensor with one element, got shape ", shape_str(shape()));
  if (device().is_cuda()) return detach().to(kCPU).item<T>();  // one small device-to-host copy
  return detail::load_as<T>(raw_data(), dtype());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  if (device().is_cuda()) return detach().to(kCPU).to_vector<T>();
  Tensor c = contiguous();
  std::vector<T> r(size_t(c.numel()));
  const char* p = static_cast<const char*>(c.raw_data());
  for (size_t i = 0; i < r.size(); ++i) r[i] = detail::load_as<T>(p + i * c.element_size(), c.dtype());
  return r;
}

}  // namespace mg
