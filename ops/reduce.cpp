// Reductions and scans. Kernels see the input as a contiguous [outer, r, inner] block (detail::arrange);
// reductions over several non-adjacent dims first move those dims to the end.
#include <memgrad/core/autocast.h>
#include <memgrad/ops/op_util.h>

namespace mg {

using namespace detail;
using kernels::ReduceOp;
using kernels::ScanOp;

Layout detail::arrange(const Tensor& x, const std::vector<int64_t>& dims) {
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

namespace {

// Gradient of a reduction, broadcast back over the reduced dims (a view, no copy).
Tensor expand_back(const Tensor& g, const Shape& in, const std::vector<int64_t>& dims) {
  return g.reshape(reduced_shape(in, dims, true)).expand(in);
}

Tensor reduce_op(Op id, ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims_, bool keepdim) {
  const char* name = op_name(id);
  OpScope scope(id);
  auto dims = normalize_dims(dims_, x.dim(), name);
  if (op == ReduceOp::Max || op == ReduceOp::Min)  // an empty sum is 0, an empty log-sum-exp -inf
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
    } else if (op == ReduceOp::LogSumExp) {  // the softmax of x over the dims
      SavedTensor sx(x), so(out);
      autograd::record(id, {x}, {out}, [in, dims, sx, so](const TensorList& g, const Node&) {
        return TensorList{expand_back(g[0], in, dims) * exp(sx.get() - expand_back(so.get(), in, dims))};
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

// max/min over a dim: values (when wanted) and int64 indices.
std::tuple<Tensor, Tensor> arg_reduce_op(Op id, ReduceOp op, const Tensor& x, int64_t dim_, bool keepdim,
                                         bool want_values) {
  const char* name = op_name(id);
  OpScope scope(id);
  int64_t dim = wrap_dim(dim_, x.dim(), name);
  std::vector<int64_t> dims = x.dim() ? std::vector<int64_t>{dim} : std::vector<int64_t>{};
  MG_CHECK(x.dim() == 0 || x.shape()[size_t(dim)] > 0, ValueError, name, ": expected a non-empty dim ", dim,
           ", got size 0");
  Shape s = reduced_shape(x.shape(), dims, keepdim);
  Tensor values = want_values ? new_output(s, x.dtype(), x.device()) : Tensor(),
         indices = new_output(s, kInt64, x.device());
  Layout l;
  {
    NoGradGuard ng;
    l = arrange(x, dims);
  }
  kernels::run(x.device(), &Backend::arg_reduce, op, l.x, values, indices, l.outer, l.r, l.inner);
  if (want_values && autograd::any_requires_grad({x})) {
    SavedTensor si(indices);
    Shape in = x.shape();
    autograd::record(id, {x}, {values}, [=](const TensorList& g, const Node&) {
      Shape ks = reduced_shape(in, dims, true);
      return TensorList{scatter_add_into_zeros(in, dims.empty() ? 0 : dims[0], si.get().reshape(ks), g[0].reshape(ks))};
    });
  }
  return {values, indices};
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

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  MG_CHECK(is_floating(x.dtype()), DTypeError, "std: expected a floating tensor, got dtype ", x.dtype());
  OpScope scope(Op::std);
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor in = amp::cast_for_float_op(x);
  if (!is_floating(in.dtype())) in = in.to(kFloat32);  // as PyTorch, integers give float32
  return reduce_op(Op::logsumexp, ReduceOp::LogSumExp, in, dims, keepdim);
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_op(Op::amax, ReduceOp::Max, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_op(Op::amin, ReduceOp::Min, x, dims, keepdim);
}
Tensor max(const Tensor& x) { return amax(x); }
Tensor min(const Tensor& x) { return amin(x); }
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce_op(Op::max, ReduceOp::Max, x, dim, keepdim, true);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce_op(Op::min, ReduceOp::Min, x, dim, keepdim, true);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return std::get<1>(arg_reduce_op(Op::argmax, ReduceOp::Max, x, dim, keepdim, false));
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return std::get<1>(arg_reduce_op(Op::argmin, ReduceOp::Min, x, dim, keepdim, false));
}

// ---- scans

namespace {
// cumprod's gradient from differentiable ops, for a backward that creates a graph:
// grad_x[k] = sum_{i >= k} g[i] prod_{j <= i, j != k} x[j], zeros in x included. The products are
// the cumprod of [r, r] copies of each line with x[k] replaced by 1 in row k: O(r^2) memory,
// where the kernel needs O(r).
Tensor cumprod_grad_math(const Tensor& x, const Tensor& g, int64_t dim) {
  if (x.dim() == 0) return g;
  const int64_t r = x.size(dim);
  const auto like_x = TensorOptions(x.dtype()).device(x.device());
  Tensor upper = triu(ones({r, r}, TensorOptions(kBool).device(x.device()))), diagonal = tril(upper);
  Tensor line = x.transpose(dim, -1).unsqueeze(-2);  // [..., 1, r]
  Shape square = line.shape();
  square[square.size() - 2] = r;
  Tensor rows = cumprod(where(diagonal, ones({}, like_x), line.expand(square)), -1);  // [..., k, i]
  Tensor terms = where(upper, rows * g.transpose(dim, -1).unsqueeze(-2), zeros({}, like_x));
  return terms.sum({-1}).transpose(dim, -1);
}

Tensor scan_op(Op id, ScanOp op, const Tensor& x_in, int64_t dim_, std::optional<DType> dtype) {
  const char* name = op_name(id);
  OpScope scope(id);
  Tensor x = dtype ? x_in.to(*dtype) : x_in;
  const int64_t dim = x.dim() ? wrap_dim(dim_, x.dim(), name) : 0;
  Layout l;
  {
    NoGradGuard ng;
    l = arrange(x, x.dim() ? std::vector<int64_t>{dim} : std::vector<int64_t>{});
  }
  Tensor out = new_output(x.shape(), is_floating(x.dtype()) ? x.dtype() : kInt64, x.device());  // PyTorch: int64
  kernels::run(x.device(), &Backend::scan, op, l.x, out, l.outer, l.r, l.inner);
  if (autograd::any_requires_grad({x})) {
    if (op == ScanOp::Sum) {  // the gradient is the reversed cumulative sum of the gradient
      autograd::record(id, {x}, {out}, [dim](const TensorList& g, const Node&) {
        return TensorList{g[0].dim() ? flip(cumsum(flip(g[0], {dim}), dim), {dim}) : g[0]};
      });
    } else {
      SavedTensor sx(l.x, x), so(out);
      std::array<int64_t, 3> lay{l.outer, l.r, l.inner};
      autograd::record(id, {x}, {out}, [sx, so, lay, dim](const TensorList& g, const Node&) {
        if (autograd::creating_graph()) return TensorList{cumprod_grad_math(sx.get(), g[0], dim)};
        Tensor xs = sx.get(), gi = new_like(xs);
        kernels::run(xs.device(), &Backend::cumprod_backward, g[0].contiguous(), xs, so.get(), gi, lay[0], lay[1],
                     lay[2]);
        return TensorList{gi};
      });
    }
  }
  return out;
}
}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return scan_op(Op::cumsum, ScanOp::Sum, x, dim, dtype);
}
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return scan_op(Op::cumprod, ScanOp::Prod, x, dim, dtype);
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

// ---- Tensor method forms
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return mg::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return mg::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return mg::max(*this); }
Tensor Tensor::min() const { return mg::min(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return mg::argmax(*this, dim, keepdim); }
Tensor Tensor::var(const std::vector<int64_t>& dims, int64_t correction, bool keepdim) const {
  return mg::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const std::vector<int64_t>& dims, int64_t correction, bool keepdim) const {
  return mg::std(*this, dims, correction, keepdim);
}
Tensor Tensor::logsumexp(const std::vector<int64_t>& dims, bool keepdim) const {
  return mg::logsumexp(*this, dims, keepdim);
}
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return mg::max(*this, dim, keepdim); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return mg::min(*this, dim, keepdim); }
Tensor Tensor::cumsum(int64_t dim) const { return mg::cumsum(*this, dim); }
Tensor Tensor::cumprod(int64_t dim) const { return mg::cumprod(*this, dim); }

}  // namespace mg
