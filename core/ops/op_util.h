// Helpers shared by the op entry points (private to core/ops).
#pragma once
#include <memgrad/autograd/node.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/ops.h>
#include <memgrad/kernels/backend.h>

namespace mg::detail {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;
using kernels::Backend;

// An op output nobody has claimed yet: category Temporary unless a scope says otherwise.
inline Tensor new_output(const Shape& shape, DType dtype, const Device& device) {
  return empty_with(shape, dtype, device, Category::Temporary);
}
inline Tensor new_like(const Tensor& t) { return new_output(t.shape(), t.dtype(), t.device()); }
inline Tensor zeros_output(const Shape& shape, DType dtype, const Device& device) {
  Tensor t = new_output(shape, dtype, device);
  kernels::run(device, &Backend::fill, t, 0.0);
  return t;
}

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  MG_CHECK(a.device() == b.device(), DeviceError, op, ": expected all tensors on the same device, got ", a.device(),
           " and ", b.device());
}
inline void check_floating(const char* op, const Tensor& t) {
  MG_CHECK(is_floating(t.dtype()), DTypeError, op, ": expected a floating tensor, got dtype ", t.dtype());
}
inline void check_dtype(const char* op, const Tensor& t, DType want, const char* what) {
  MG_CHECK(t.dtype() == want, DTypeError, op, ": expected ", what, " of dtype ", want, ", got ", t.dtype());
}

// PyTorch's result_type for two tensors: 0-d tensors only decide when of a higher category.
DType result_type(const Tensor& a, const Tensor& b);

// t converted to `dtype` and expanded to `shape`, without recording history.
inline Tensor prepare(const Tensor& t, DType dtype, const Shape& shape) {
  NoGradGuard ng;
  return t.to(dtype).expand(shape);
}

// A view of `base` sharing its storage; records `backward` when base requires grad.
Tensor make_view(Op id, const Tensor& base, Shape shape, Strides strides, int64_t offset,
                 autograd::BackwardFn backward);

// Raises when an in-place op on `self` would break autograd (leaf or view needing grad).
void check_inplace(Op id, const Tensor& self, const TensorList& others);

// Gradient `g` reduced to `like`'s shape and converted to its dtype.
inline Tensor grad_for(const Tensor& g, const Tensor& like) { return sum_to(g, like.shape()).to(like.dtype()); }
inline Tensor grad_for(const Tensor& g, const Shape& shape, DType dtype) { return sum_to(g, shape).to(dtype); }

}  // namespace mg::detail
