// Joining, splitting and indexing ops.
#include <memgrad/core/ops/op_util.h>

namespace mg {

using namespace detail;

Tensor cat(const std::vector<Tensor>& xs, int64_t dim_) {
  OpScope scope(Op::cat);
  MG_CHECK(!xs.empty(), ValueError, "cat: expected at least one tensor, got none");
  const Tensor& first = xs[0];
  int64_t dim = wrap_dim(dim_, first.dim(), "cat");
  DType ct = first.dtype();
  Shape s = first.shape();
  s[size_t(dim)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    check_same_device("cat", first, xs[i]);
    MG_CHECK(xs[i].dim() == first.dim(), ShapeError, "cat: expected tensors with ", first.dim(), " dims, got ",
             shape_str(xs[i].shape()), " at position ", i);
    for (int64_t d = 0; d < first.dim(); ++d)
      MG_CHECK(d == dim || xs[i].shape()[size_t(d)] == first.shape()[size_t(d)], ShapeError, "cat: expected size ",
               first.shape()[size_t(d)], " in dim ", d, ", got ", shape_str(xs[i].shape()), " at position ", i);
    auto total = checked_add(s[size_t(dim)], xs[i].shape()[size_t(dim)]);
    MG_CHECK(total, ShapeError, "cat: the sizes along dim ", dim, " add up to more than 2^63 - 1 (at position ", i,
             ", shape ", shape_str(xs[i].shape()), ")");
    s[size_t(dim)] = *total;
    ct = promote_types(ct, xs[i].dtype());
  }
  Tensor out = new_output(s, ct, first.device());
  std::vector<int64_t> sizes;
  {
    NoGradGuard ng;
    int64_t off = 0;
    for (auto& x : xs) {
      int64_t n = x.shape()[size_t(dim)];
      kernels::run(out.device(), &Backend::copy, x, out.narrow(dim, off, n));
      sizes.push_back(n);
      off += n;
    }
  }
  std::vector<DType> types;
  for (auto& x : xs) types.push_back(x.dtype());
  autograd::record(Op::cat, xs, {out}, [sizes, types, dim](const TensorList& g, const Node& n) {
    TensorList r(sizes.size());
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (n.needs_input_grad(i)) r[i] = g[0].narrow(dim, off, sizes[i]).to(types[i]);
      off += sizes[i];
    }
    return r;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  MG_CHECK(!xs.empty(), ValueError, "stack: expected at least one tensor, got none");
  int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> u;
  for (size_t i = 0; i < xs.size(); ++i) {
    MG_CHECK(xs[i].shape() == xs[0].shape(), ShapeError, "stack: expected tensors of shape ", shape_str(xs[0].shape()),
             ", got ", shape_str(xs[i].shape()), " at position ", i);
    u.push_back(xs[i].unsqueeze(d));
  }
  return cat(u, d);
}

std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  int64_t d = wrap_dim(dim, x.dim(), "split"), total = 0;
  for (auto s : sizes) total += s;
  MG_CHECK(total == x.size(d), ShapeError, "split: expected sizes adding up to ", x.size(d), " along dim ", d, ", got ",
           total);
  std::vector<Tensor> r;
  int64_t off = 0;
  for (auto s : sizes) r.push_back(x.narrow(d, off, s)), off += s;
  return r;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  MG_CHECK(split_size > 0, ValueError, "split: expected a positive split size, got ", split_size);
  int64_t d = wrap_dim(dim, x.dim(), "split"), n = x.size(d);
  std::vector<int64_t> sizes;
  for (int64_t off = 0; off < n; off += split_size) sizes.push_back(std::min(split_size, n - off));
  if (sizes.empty()) sizes.push_back(0);
  return split_with_sizes(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  MG_CHECK(chunks > 0, ValueError, "chunk: expected a positive number of chunks, got ", chunks);
  int64_t n = x.size(dim);
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, 1), dim);
}

namespace {
void check_index(const char* op, const Tensor& x, const Tensor& index) {
  check_dtype(op, index, kInt64, "an index");
  check_same_device(op, x, index);
}
}  // namespace

Tensor index_select(const Tensor& x, int64_t dim_, const Tensor& index) {
  OpScope scope(Op::index_select);
  check_index("index_select", x, index);
  MG_CHECK(index.dim() <= 1, ShapeError, "index_select: expected a 1-d index, got shape ", shape_str(index.shape()));
  int64_t dim = wrap_dim(dim_, x.dim(), "index_select");
  Shape s = x.shape();
  if (x.dim()) s[size_t(dim)] = index.numel();
  Tensor out = new_output(s, x.dtype(), x.device());
  Tensor xc, ic;
  {
    NoGradGuard ng;
    xc = x.contiguous();
    ic = index.contiguous().reshape({-1});
  }
  kernels::run(x.device(), &Backend::index_select, xc, dim, ic, out);
  if (autograd::any_requires_grad({x})) {
    SavedTensor si(ic);
    Shape in = x.shape();
    DType t = x.dtype();
    Device d = x.device();
    autograd::record(Op::index_select, {x}, {out}, [=](const TensorList& g, const Node&) {
      Tensor gi = zeros_output(in, t, d);
      kernels::run(d, &Backend::index_add, gi, dim, si.get(), g[0].contiguous());
      return TensorList{gi};
    });
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  MG_CHECK(weight.dim() == 2, ShapeError, "embedding: expected a 2-d weight [num, dim], got ",
           shape_str(weight.shape()));
  check_index("embedding", weight, indices);
  Shape s = indices.shape();
  s.push_back(weight.size(1));
  try {
    return index_select(weight, 0, indices.reshape({-1})).view(s);
  } catch (const IndexError& e) {  // name the op the user called
    throw IndexError(detail::str("embedding: ", e.what()));
  }
}

Tensor gather(const Tensor& x, int64_t dim_, const Tensor& index) {
  OpScope scope(Op::gather);
  check_index("gather", x, index);
  int64_t dim = wrap_dim(dim_, x.dim(), "gather");
  MG_CHECK(index.dim() == x.dim(), ShapeError, "gather: expected an index with ", x.dim(), " dims, got ",
           shape_str(index.shape()));
  for (int64_t d = 0; d < x.dim(); ++d)
    MG_CHECK(d == dim || index.shape()[size_t(d)] <= x.shape()[size_t(d)], ShapeError, "gather: index shape ",
             shape_str(index.shape()), " exceeds input shape ", shape_str(x.shape()), " in dim ", d);
  Tensor out = new_output(index.shape(), x.dtype(), x.device());
  Tensor ic;
  {
    NoGradGuard ng;
    ic = index.contiguous();
  }
  kernels::run(x.device(), &Backend::gather, x, dim, ic, out);
  if (autograd::any_requires_grad({x})) {
    SavedTensor si(ic);
    Shape in = x.shape();
    DType t = x.dtype();
    Device d = x.device();
    autograd::record(Op::gather, {x}, {out}, [=](const TensorList& g, const Node&) {
      Tensor gi = zeros_output(in, t, d);
      kernels::run(d, &Backend::scatter_add, gi, dim, si.get(), g[0].contiguous());
      return TensorList{gi};
    });
  }
  return out;
}

namespace {
// Keeps x where (column - row) satisfies the triangle test, zeroes the rest.
Tensor triangle(Op id, const Tensor& x, int64_t diagonal, bool lower) {
  const char* op = op_name(id);
  MG_CHECK(x.dim() >= 2, ShapeError, op, ": expected a tensor with at least 2 dims, got ", shape_str(x.shape()));
  Tensor mask;
  {
    NoGradGuard ng;
    MemoryScope scratch(Category::Temporary);
    auto opts = TensorOptions(kInt64).device(x.device());
    Tensor rows = arange(x.size(-2), opts).unsqueeze(1), cols = arange(x.size(-1), opts).unsqueeze(0);
    Tensor diff = cols - rows;
    mask = lower ? le(diff, Scalar(diagonal)) : ge(diff, Scalar(diagonal));
  }
  return where(mask, x, zeros({}, TensorOptions(x.dtype()).device(x.device())));
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(Op::tril, x, diagonal, true); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(Op::triu, x, diagonal, false); }

}  // namespace mg
