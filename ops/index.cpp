// Joining, splitting and indexing ops.
#include <memgrad/ops/op_util.h>

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
    autograd::record(Op::index_select, {x}, {out}, [=](const TensorList& g, const Node&) {
      return TensorList{index_add_into_zeros(in, dim, si.get(), g[0])};
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

namespace {
// The gather and scatter kernels address a dim: a 0-d tensor (its dim 0 is itself) goes in as [1].
Tensor with_a_dim(const Tensor& t) {
  NoGradGuard ng;
  return t.dim() ? t : t.view({1});
}
}  // namespace

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
  kernels::run(x.device(), &Backend::gather, with_a_dim(x), dim, with_a_dim(ic), with_a_dim(out));
  if (autograd::any_requires_grad({x})) {
    SavedTensor si(ic);
    Shape in = x.shape();
    autograd::record(Op::gather, {x}, {out}, [=](const TensorList& g, const Node&) {
      return TensorList{scatter_add_into_zeros(in, dim, si.get(), g[0])};
    });
  }
  return out;
}

// ---- scatter, scatter_add, index_add and their backward helpers

namespace detail {

Tensor scatter_add_into_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = zeros_output(shape, src.dtype(), src.device()), ic, sc;
  {
    NoGradGuard ng;
    ic = index.contiguous();
    sc = src.contiguous();
  }
  kernels::run(src.device(), &Backend::scatter_add, with_a_dim(out), dim, with_a_dim(ic), with_a_dim(sc));
  SavedTensor si(autograd::any_requires_grad({src}) ? ic : Tensor());
  autograd::record(Op::scatter_add, {src}, {out},
                   [dim, si](const TensorList& g, const Node&) { return TensorList{gather(g[0], dim, si.get())}; });
  return out;
}

Tensor index_add_into_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = zeros_output(shape, src.dtype(), src.device()), sc;
  {
    NoGradGuard ng;
    sc = src.contiguous();
  }
  kernels::run(src.device(), &Backend::index_add, out, dim, index, sc);
  SavedTensor si(autograd::any_requires_grad({src}) ? index : Tensor());
  autograd::record(Op::index_add, {src}, {out}, [dim, si](const TensorList& g, const Node&) {
    return TensorList{index_select(g[0], dim, si.get())};
  });
  return out;
}

}  // namespace detail

namespace {

// PyTorch's shape rules for scatter: index has self's number of dims, and in each dim it is no
// larger than src, nor than self outside `dim`.
void check_scatter(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index(op, self, index);
  MG_CHECK(index.dim() == self.dim() && (!src.defined() || src.dim() == self.dim()), ShapeError, op,
           ": expected self, index and src with the same number of dims, got ", shape_str(self.shape()), ", ",
           shape_str(index.shape()), " and ", src.defined() ? shape_str(src.shape()) : "a scalar");
  for (int64_t d = 0; d < self.dim(); ++d)
    MG_CHECK((d == dim || index.size(d) <= self.size(d)) && (!src.defined() || index.size(d) <= src.size(d)),
             ShapeError, op, ": index ", shape_str(index.shape()), " exceeds self ", shape_str(self.shape()),
             src.defined() ? " or src " + shape_str(src.shape()) : std::string(), " in dim ", d);
  if (src.defined()) {
    check_same_device(op, self, src);
    MG_CHECK(src.dtype() == self.dtype(), DTypeError, op, ": expected src of self's dtype ", self.dtype(), ", got ",
             src.dtype());
  }
}

// t, zero-padded at the end of each dim to `shape` (the gradient of src larger than index).
Tensor pad_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Tensor z = zeros_output(shape, t.dtype(), t.device()), corner = z;
  for (int64_t d = 0; d < t.dim(); ++d) corner = corner.narrow(d, 0, t.size(d));
  corner.copy_(t);
  return z;
}

// self.scatter_ / scatter_add_ (add = true) with src of self's dtype, or `value` where src is undefined.
Tensor& scatter_inplace(Op id, Tensor& self, int64_t dim_, const Tensor& index, const Tensor& src, double value,
                        bool add) {
  const char* op = op_name(id);
  check_inplace(id, self, {src});
  const int64_t dim = wrap_dim(dim_, self.dim(), op);
  check_scatter(op, self, dim, index, src);
  OpScope scope(id);
  Tensor ic, sc;
  {
    NoGradGuard ng;
    ic = index.contiguous();
    if (src.defined()) {
      sc = src;
      for (int64_t d = 0; d < src.dim(); ++d) sc = sc.narrow(d, 0, index.size(d));
      sc = sc.contiguous();
    } else {
      MemoryScope scratch(Category::Temporary);
      sc = full(index.shape(), value, TensorOptions(self.dtype()).device(self.device()));
    }
  }
  kernels::run(self.device(), add ? &Backend::scatter_add : &Backend::scatter, with_a_dim(self), dim, with_a_dim(ic),
               with_a_dim(sc));
  self.storage()->bump_version();
  if (autograd::any_requires_grad({self, src})) {
    SavedTensor si(ic);
    const Shape ss = src.defined() ? src.shape() : Shape{};
    record_inplace(id, self, {self, src}, [=](const TensorList& g, const Node& n) {
      Tensor idx = si.get(), gs;
      if (n.needs_input_grad(1)) gs = pad_to(gather(g[0], dim, idx), ss);
      // Written elements lose their old value's gradient; added ones keep it.
      Tensor gself = n.needs_input_grad(0) ? (add ? g[0] : scatter(g[0], dim, idx, Scalar(0.0))) : Tensor();
      return TensorList{gself, gs};
    });
  }
  return self;
}

}  // namespace

Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_inplace(Op::scatter_, *this, dim, index, src, 0, false);
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Scalar& value) {
  return scatter_inplace(Op::scatter_, *this, dim, index, Tensor(), value.value, false);
}
Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_inplace(Op::scatter_add_, *this, dim, index, src, 0, true);
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  OpScope scope(Op::scatter);
  return x.clone().scatter_(dim, index, src);
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  OpScope scope(Op::scatter);
  return x.clone().scatter_(dim, index, value);
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  OpScope scope(Op::scatter_add);
  return x.clone().scatter_add_(dim, index, src);
}

Tensor& Tensor::index_add_(int64_t dim_, const Tensor& index, const Tensor& source, const Scalar& alpha) {
  check_inplace(Op::index_add_, *this, {source});
  const int64_t dim = wrap_dim(dim_, this->dim(), "index_add_");
  check_index("index_add_", *this, index);
  check_same_device("index_add_", *this, source);
  MG_CHECK(source.dtype() == dtype(), DTypeError, "index_add_: expected a source of self's dtype ", dtype(), ", got ",
           source.dtype());
  MG_CHECK(index.dim() <= 1, ShapeError, "index_add_: expected a 1-d index, got shape ", shape_str(index.shape()));
  Shape expect = shape();
  if (this->dim()) expect[size_t(dim)] = index.numel();
  MG_CHECK(source.shape() == expect, ShapeError, "index_add_: expected a source of shape ", shape_str(expect),
           " for self ", shape_str(shape()), " and ", index.numel(), " indices, got ", shape_str(source.shape()));
  OpScope scope(Op::index_add_);
  Tensor ic, sc, target;
  {
    NoGradGuard ng;
    ic = index.contiguous().reshape({-1});
    sc = (alpha.value == 1 ? source : source * alpha).contiguous();
    target = is_contiguous() ? *this : contiguous();  // the kernel adds into contiguous memory
  }
  kernels::run(device(), &Backend::index_add, target, dim, ic, sc);
  if (!target.is_same(*this)) {
    NoGradGuard ng;
    kernels::run(device(), &Backend::copy, target, *this);
  }
  storage()->bump_version();
  if (autograd::any_requires_grad({*this, source})) {
    SavedTensor si(ic);
    const double a = alpha.value;
    record_inplace(Op::index_add_, *this, {*this, source}, [=](const TensorList& g, const Node& n) {
      Tensor gs = n.needs_input_grad(1) ? index_select(g[0], dim, si.get()) : Tensor();
      return TensorList{g[0], gs.defined() && a != 1 ? gs * a : gs};
    });
  }
  return *this;
}
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha) {
  OpScope scope(Op::index_add);
  return x.clone().index_add_(dim, index, source, alpha);
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  OpScope scope(Op::one_hot);
  check_dtype("one_hot", index, kInt64, "class indices");
  MG_CHECK(num_classes >= -1, ValueError, "one_hot: expected num_classes >= -1, got ", num_classes);
  if (num_classes == -1) {  // the largest index + 1: a read of the values
    MG_CHECK(!index.is_meta(), MetaTensorError,
             "one_hot: a meta tensor has no values to count classes from; pass "
             "num_classes");
    MG_CHECK(index.numel() > 0, ValueError, "one_hot: cannot infer num_classes from an empty tensor; pass it");
    num_classes = max(index).item<int64_t>() + 1;
  }
  Shape s = index.shape();
  s.push_back(num_classes);
  Tensor out = zeros_output(s, kInt64, index.device());
  try {
    NoGradGuard ng;
    out.scatter_(-1, index.unsqueeze(-1), Scalar(int64_t(1)));
  } catch (const IndexError& e) {  // name the op the user called
    throw IndexError(detail::str("one_hot: expected class values in [0, ", num_classes, "); ", e.what()));
  }
  return out;
}

// ---- flip and repeat

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  OpScope scope(Op::flip);
  std::vector<bool> flipped(size_t(x.dim()), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim(), "flip");
    MG_CHECK(!flipped[size_t(w)], ValueError, "flip: dim ", w, " appears more than once in the dims");
    flipped[size_t(w)] = true;
  }
  // A view with the flipped dims' strides negated, starting at their last element, copied.
  Strides st = x.strides();
  int64_t offset = x.storage_offset();
  if (x.numel() > 0)
    for (int64_t d = 0; d < x.dim(); ++d)
      if (flipped[size_t(d)]) offset += (x.size(d) - 1) * st[size_t(d)], st[size_t(d)] = -st[size_t(d)];
  Tensor out = new_output(x.shape(), x.dtype(), x.device());
  kernels::run(x.device(), &Backend::copy, make_tensor(x.storage(), x.shape(), st, offset, x.dtype()), out);
  autograd::record(Op::flip, {x}, {out},
                   [dims](const TensorList& g, const Node&) { return TensorList{flip(g[0], dims)}; });
  return out;
}
Tensor Tensor::flip(const std::vector<int64_t>& dims) const { return mg::flip(*this, dims); }

Tensor Tensor::repeat(const std::vector<int64_t>& repeats) const {
  MG_CHECK(int64_t(repeats.size()) >= dim(), ShapeError, "repeat: expected at least ", dim(),
           " repeats (one per dim), got ", repeats.size());
  for (int64_t r : repeats) MG_CHECK(r >= 0, ValueError, "repeat: expected non-negative repeats, got ", r);
  OpScope scope(Op::repeat);
  // x viewed as [1, s0, 1, s1, ...] (leading dims of size 1 added), expanded to [r0, s0, r1, s1, ...]
  // and copied into [r0 * s0, r1 * s1, ...]; the gradient sums over the repeats.
  Shape padded(repeats.size() - size_t(dim()), 1);
  padded.insert(padded.end(), shape().begin(), shape().end());
  Shape pairs, expanded, out_shape;
  std::vector<int64_t> repeat_dims;
  for (size_t d = 0; d < repeats.size(); ++d) {
    pairs.insert(pairs.end(), {1, padded[d]});
    expanded.insert(expanded.end(), {repeats[d], padded[d]});
    out_shape.push_back(repeats[d] * padded[d]);
    repeat_dims.push_back(int64_t(2 * d));
  }
  Tensor out = new_output(out_shape, dtype(), device());
  {
    NoGradGuard ng;
    kernels::run(device(), &Backend::copy, reshape(pairs).expand(expanded), out.view(expanded));
  }
  Shape in = shape();
  autograd::record(Op::repeat, {*this}, {out}, [=](const TensorList& g, const Node&) {
    return TensorList{repeat_dims.empty() ? g[0] : g[0].reshape(expanded).sum(repeat_dims).reshape(in)};
  });
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
