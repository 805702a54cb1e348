// Reductions and the softmax family. Kernels see the input as a contiguous [outer, r, inner]
// block; reductions over several non-adjacent dims first move those dims to the end.
#include <memgrad/core/autocast.h>
#include <memgrad/core/ops/op_util.h>

namespace mg {

using namespace detail;
using kernels::ReduceOp;

namespace {

struct Layout {
  Tensor x;  // contiguous, reduced dims forming the middle block
  int64_t outer = 1, r = 1, inner = 1;
};

// Arranges x so that `dims` (sorted) form one contiguous block [outer, r, inner].
Layout arrange(const Tensor& x, const std::vector<int64_t>& dims) {
  Layout l;
  bool adjacent = dims.empty() || dims.back() - dims.front() + 1 == int64_t(dims.size());
  if (adjacent) {
    l.x = x.contiguous();
    int64_t lo = dims.empty() ? 0 : dims.front(), hi = dims.empty() ? -1 : dims.back();
    for (int64_t d = 0; d < x.dim(); ++d) (d < lo ? l.outer : d <= hi ? l.r : l.inner) *= x.shape()[size_t(d)];
    return l;
  }
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) perm.push_back(d), l.outer *= x.shape()[size_t(d)];
  for (auto d : dims) perm.push_back(d), l.r *= x.shape()[size_t(d)];
  l.x = x.permute(perm).contiguous();
  return l;
}

// Gradient of a reduction, broadcast back over the reduced dims (a view, no copy).
Tensor expand_back(const Tensor& g, const Shape& in, const std::vector<int64_t>& dims) {
  return g.reshape(reduced_shape(in, dims, true)).expand(in);
}

Tensor reduce_op(Op id, ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims_, bool keepdim) {
  const char* name = op_name(id);
  OpScope scope(id);
  auto dims = normalize_dims(dims_, x.dim(), name);
  if (op != ReduceOp::Sum)
    for (auto d : dims)
      MG_CHECK(x.shape()[size_t(d)] > 0, ValueError, name, ": expected a non-empty dim ", d, " to reduce, got size 0");
  DType out_t = op == ReduceOp::Sum && !is_floating(x.dtype()) ? kInt64 : x.dtype();
  Tensor out = new_output(reduced_shape(x.shape(), dims, keepdim), out_t, x.device());
  Layout l;
  {
    NoGradGuard ng;
    l = arrange(x, dims);
  }
  kernels::run(x.device(), &Backend::reduce, op, l.x, out, l.outer, l.r, l.inner);
  if (autograd::any_requires_grad({x})) {
    Shape in = x.shape();
    if (op == ReduceOp::Sum) {
      autograd::record(id, {x}, {out}, [in, dims](const TensorList& g, const Node&) {
        return TensorList{expand_back(g[0], in, dims)};
      });
    } else {  // amax/amin: ties share the gradient evenly
      SavedTensor sx(x), so(out);
      autograd::record(id, {x}, {out}, [in, dims, sx, so](const TensorList& g, const Node&) {
        Tensor mask = eq(sx.get(), expand_back(so.get(), in, dims)).to(g[0].dtype());
        Tensor count = sum(mask, dims, true);
        return TensorList{mask * expand_back(g[0], in, dims) / count};
      });
    }
  }
  return out;
}

ValuesIndices arg_reduce_op(Op id, ReduceOp op, const Tensor& x, int64_t dim_, bool keepdim, bool want_values) {
  const char* name = op_name(id);
  OpScope scope(id);
  int64_t dim = wrap_dim(dim_, x.dim(), name);
  std::vector<int64_t> dims = x.dim() ? std::vector<int64_t>{dim} : std::vector<int64_t>{};
  MG_CHECK(x.dim() == 0 || x.shape()[size_t(dim)] > 0, ValueError, name, ": expected a non-empty dim ", dim,
           ", got size 0");
  Shape s = reduced_shape(x.shape(), dims, keepdim);
  ValuesIndices r{want_values ? new_output(s, x.dtype(), x.device()) : Tensor(), new_output(s, kInt64, x.device())};
  Layout l;
  {
    NoGradGuard ng;
    l = arrange(x, dims);
  }
  kernels::run(x.device(), &Backend::arg_reduce, op, l.x, r.values, r.indices, l.outer, l.r, l.inner);
  if (want_values && autograd::any_requires_grad({x})) {
    SavedTensor si(r.indices);
    Shape in = x.shape();
    DType t = x.dtype();
    Device d = x.device();
    autograd::record(id, {x}, {r.values}, [=](const TensorList& g, const Node&) {
      Shape ks = reduced_shape(in, dims, true);
      Tensor gi = zeros_output(in, t, d);
      kernels::run(d, &Backend::scatter_add, gi, dims.empty() ? 0 : dims[0], si.get().reshape(ks),
                   g[0].reshape(ks).contiguous());
      return TensorList{gi};
    });
  }
  return r;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_op(Op::sum, ReduceOp::Sum, amp::cast_for_float_op(x), dims, keepdim);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  MG_CHECK(is_floating(x.dtype()), DTypeError, "mean: expected a floating tensor, got dtype ", x.dtype());
  auto d = normalize_dims(dims, x.dim(), "mean");
  int64_t n = 1;
  for (auto i : d) n *= x.shape()[size_t(i)];
  return sum(x, dims, keepdim) * (1.0 / double(n));
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  MG_CHECK(is_floating(x.dtype()), DTypeError, "var: expected a floating tensor, got dtype ", x.dtype());
  auto d = normalize_dims(dims, x.dim(), "var");
  int64_t n = 1;
  for (auto i : d) n *= x.shape()[size_t(i)];
  Tensor centered = x - mean(x, dims, true);
  return sum(centered * centered, dims, keepdim) * (1.0 / double(std::max<int64_t>(n - correction, 0)));
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_op(Op::amax, ReduceOp::Max, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_op(Op::amin, ReduceOp::Min, x, dims, keepdim);
}
Tensor max(const Tensor& x) { return amax(x); }
Tensor min(const Tensor& x) { return amin(x); }
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce_op(Op::max, ReduceOp::Max, x, dim, keepdim, true);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce_op(Op::min, ReduceOp::Min, x, dim, keepdim, true);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce_op(Op::argmax, ReduceOp::Max, x, dim, keepdim, false).indices;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce_op(Op::argmin, ReduceOp::Min, x, dim, keepdim, false).indices;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  MG_CHECK(broadcast_shapes(shape, x.shape(), "sum_to") == x.shape(), ShapeError, "sum_to: shape ", shape_str(shape),
           " does not broadcast to ", shape_str(x.shape()));
  std::vector<int64_t> dims;
  size_t lead = x.shape().size() - shape.size();
  for (size_t i = 0; i < x.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) dims.push_back(int64_t(i));
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, true).reshape(shape);
}

// ---- softmax family

namespace {
Tensor softmax_op(Op id, const Tensor& x_in, int64_t dim_, bool log) {
  const char* name = op_name(id);
  Tensor x = amp::cast_for_float_op(x_in);
  OpScope scope(id);
  check_floating(name, x);
  int64_t dim = wrap_dim(dim_, x.dim(), name);
  Layout l;
  {
    NoGradGuard ng;
    l = arrange(x, x.dim() ? std::vector<int64_t>{dim} : std::vector<int64_t>{});
  }
  Tensor out = new_like(l.x);
  kernels::run(x.device(), &Backend::softmax, l.x, out, l.outer, l.r, l.inner, log);
  if (autograd::any_requires_grad({x})) {
    SavedTensor so(out);
    autograd::record(id, {x}, {out},
                     [so, l = std::array<int64_t, 3>{l.outer, l.r, l.inner}, log](const TensorList& g, const Node&) {
                       Tensor y = so.get(), gc = g[0].contiguous(), gi = new_like(y);
                       kernels::run(y.device(), &Backend::softmax_backward, gc, y, gi, l[0], l[1], l[2], log);
                       return TensorList{gi};
                     });
  }
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(Op::softmax, x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(Op::log_softmax, x, dim, true); }

// ---- Tensor method forms
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return mg::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return mg::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return mg::max(*this); }
Tensor Tensor::min() const { return mg::min(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return mg::argmax(*this, dim, keepdim); }
Tensor Tensor::var(const std::vector<int64_t>& dims, int64_t correction, bool keepdim) const {
  return mg::var(*this, dims, correction, keepdim);
}
Tensor Tensor::softmax(int64_t dim) const { return mg::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return mg::log_softmax(*this, dim); }

}  // namespace mg
