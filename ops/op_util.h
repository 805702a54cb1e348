// Helpers shared by the op entry points (private to ops/).
#pragma once
#include <memgrad/autograd/node.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/kernels/backend.h>
#include <memgrad/ops/ops.h>

namespace mg::detail {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;
using kernels::Backend;

// An op output nobody has claimed yet: category Temporary unless a scope says otherwise.
inline Tensor new_output(Shape shape, DType dtype, const Device& device) {
  return empty_with(std::move(shape), dtype, device, Category::Temporary);
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
  if (t.dtype() == dtype && t.shape() == shape) return t;  // the common case: nothing to build
  NoGradGuard ng;
  return t.to(dtype).expand(shape);
}

// x arranged so that `dims` (sorted) form one contiguous block [outer, r, inner]: how the reduce,
// scan, sort and softmax kernels see their input (reductions over non-adjacent dims move them last).
struct Layout {
  Tensor x;  // contiguous, the dims forming the middle block
  int64_t outer = 1, r = 1, inner = 1;
};
Layout arrange(const Tensor& x, const std::vector<int64_t>& dims);

// attn_mask's checks (bool, or of the dtype of `like`, called like_name; broadcasting to `want`; not
// with is_causal) and the mask expanded to `want`: a view, no copy. Undefined without a mask.
Tensor expand_mask(const char* op, const char* like_name, const Tensor& attn_mask, bool is_causal, const Tensor& like,
                   const Shape& want);
// The expanded mask's strides over the batch dims (size-1 dims dropped), for the attention and
// scaled_masked_softmax kernels.
kernels::AttentionMask describe_mask(const Tensor& expanded, bool is_bool);

// A view of `base` sharing its storage; records `backward` when base requires grad.
Tensor make_view(Op id, const Tensor& base, Shape shape, Strides strides, int64_t offset,
                 autograd::BackwardFn backward);
// The view of `base`'s storage at `offset` (in elements, as storage_offset()) with these sizes and
// strides, whose elements are distinct and lie within base's (what in-place ops on views rebuild
// histories from).
Tensor as_strided_view(const Tensor& base, Shape shape, Strides strides, int64_t offset);
// Zeros with these strides, in a storage of their own starting at offset 0.
Tensor zeros_strided(const Shape& shape, const Strides& strides, DType dtype, const Device& device);
// Brings a view's history up to date when its storage changed in place since it was set.
void sync_view_history(TensorImpl* view);

// Raises when an in-place op on `self` cannot be differentiated: self is a leaf that requires
// grad, or a view of one, or a view with repeated elements.
void check_inplace(Op id, const Tensor& self, const TensorList& others);
// Records the backward of an in-place op on `self` (inputs[0] is self, the others follow). On a
// view this rebases the view's base's history, as libtorch does (CopySlices), so gradients flow
// through the base as through the view.
void record_inplace(Op id, const Tensor& self, const TensorList& inputs, autograd::BackwardFn backward);

// Zeros of `shape` with src added at index along dim (scatter_add), or src's slices added at the
// 1-d index (index_add), differentiable in src: the backward of gather and index_select.
Tensor scatter_add_into_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add_into_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);
// x * keep / (1 - p) with the mask the counters [offset, offset + numel) of `seed` give element by
// element (the dropout op's draw); its backward applies the same mask.
Tensor dropout_with(const Tensor& x, double p, uint64_t seed, uint64_t offset);

// Gradient `g` reduced to `like`'s shape and converted to its dtype.
inline Tensor grad_for(const Tensor& g, const Tensor& like) { return sum_to(g, like.shape()).to(like.dtype()); }
inline Tensor grad_for(const Tensor& g, const Shape& shape, DType dtype) { return sum_to(g, shape).to(dtype); }

}  // namespace mg::detail
