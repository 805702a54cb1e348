// Views share storage with their base; conversions copy. Each records its backward.
#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/tensor_impl.h>
#include <memgrad/ops/op_util.h>

namespace mg {

namespace detail {

DType result_type(const Tensor& a, const Tensor& b) {
  bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za == zb) return promote_types(a.dtype(), b.dtype());
  auto category = [](DType t) { return t == kBool ? 0 : is_floating(t) ? 2 : 1; };
  const Tensor& zero = za ? a : b;
  const Tensor& dimmed = za ? b : a;
  return category(zero.dtype()) > category(dimmed.dtype()) ? zero.dtype() : dimmed.dtype();
}

Tensor make_view(Op id, const Tensor& base, Shape shape, Strides strides, int64_t offset,
                 autograd::BackwardFn backward) {
  numel_of(shape);  // a view's element count must fit in int64 too (expand can ask for more)
  Tensor v = make_tensor(base.storage(), std::move(shape), std::move(strides), offset, base.dtype());
  auto* i = v.impl();
  i->view_base = base.impl()->view_base ? base.impl()->view_base : base.impl_ptr();
  i->view_tracks_grad = GradMode::is_enabled();
  i->view_version = base.version();
  autograd::record(id, {base}, {v}, std::move(backward));
  return v;
}

Tensor zeros_strided(const Shape& shape, const Strides& strides, DType dtype, const Device& device) {
  int64_t extent = numel_of(shape) ? 1 : 0;
  for (size_t d = 0; d < shape.size() && extent; ++d) extent += (shape[d] - 1) * strides[d];
  auto storage = std::make_shared<Storage>(device, size_t(extent) * dtype_size(dtype), Category::Temporary);
  Tensor t = make_tensor(std::move(storage), shape, strides, 0, dtype);
  kernels::run(device, &Backend::fill, t, 0.0);
  return t;
}

Tensor as_strided_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  // Backward: the gradient at the view's place in zeros laid out like the base (which a view of
  // the base may not cover), with the base's strides so the same offsets address it.
  Shape bs = base.shape(), vs = shape;
  Strides bst = base.strides(), vst = strides;
  const int64_t rel = offset - base.storage_offset();
  DType t = base.dtype();
  Device d = base.device();
  return make_view(Op::as_strided, base, std::move(shape), std::move(strides), offset,
                   [=](const TensorList& g, const Node&) {
                     Tensor z = zeros_strided(bs, bst, t, d);
                     as_strided_view(z, vs, vst, rel).copy_(g[0]);
                     return TensorList{z};
                   });
}

namespace {

// A view's history as a strided view of its base's current history.
void set_view_history(TensorImpl* v) {
  Tensor base(v->view_base);
  v->view_version = v->storage->version();
  if (!base.requires_grad()) return;
  EnableGradGuard grad_mode;  // the history is the base's, whatever the caller's mode
  Tensor alias = as_strided_view(base, v->shape, v->strides, v->offset);
  v->grad_fn = alias.impl()->grad_fn;
  v->output_nr = 0;
  v->requires_grad = true;
}

// libtorch's CopySlices: the history of a base after an in-place op `fn` on one of its views. The
// base's gradient passes through unchanged outside the view; inside it, fn's backward maps it to
// the gradient w.r.t. the view's old values. fn's other inputs get their gradients from fn too.
class CopySlices : public autograd::Node {
 public:
  CopySlices(const Tensor& base, const Tensor& view, std::shared_ptr<Node> fn)
      : Node(Op::none, "CopySlices"),
        base_shape_(base.shape()),
        base_strides_(base.strides()),
        view_shape_(view.shape()),
        view_strides_(view.strides()),
        view_offset_(view.storage_offset() - base.storage_offset()),
        fn_(std::move(fn)) {}

  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];
    Tensor result = zeros_strided(base_shape_, base_strides_, g.dtype(), g.device());
    result.copy_(g);
    Tensor slice = as_strided_view(result, view_shape_, view_strides_, view_offset_);
    TensorList r = fn_->apply({slice.clone()});
    if (!r.empty() && r[0].defined())
      slice.copy_(r[0]);
    else
      slice.zero_();
    r[0] = result;
    return r;
  }
  void release_saved() override { fn_->release_saved(); }

 private:
  Shape base_shape_;
  Strides base_strides_;
  Shape view_shape_;
  Strides view_strides_;
  int64_t view_offset_;
  std::shared_ptr<Node> fn_;
};

}  // namespace

void sync_view_history(TensorImpl* v) {
  if (!v->view_base || !v->view_tracks_grad || v->view_version == v->storage->version()) return;
  set_view_history(v);
}

void record_inplace(Op id, const Tensor& self, const TensorList& inputs, autograd::BackwardFn backward) {
  auto* v = self.impl();
  if (!v->view_base || !autograd::any_requires_grad(inputs)) {
    autograd::record(id, inputs, {self}, std::move(backward));
    return;
  }
  Tensor base(v->view_base);
  set_view_history(v);  // fn's first input: the view's old values, from the base's old history
  auto fn = autograd::record(id, inputs, {self}, std::move(backward));
  auto copy = std::make_shared<CopySlices>(base, self, fn);
  copy->next_edges().push_back(autograd::gradient_edge(base));
  for (size_t i = 1; i < fn->next_edges().size(); ++i) copy->next_edges().push_back(fn->next_edges()[i]);
  copy->outputs().push_back({base.shape(), base.dtype(), base.device()});
  auto* b = base.impl();
  b->grad_fn = copy;
  b->output_nr = 0;
  b->requires_grad = true;
  set_view_history(v);  // the view now reads the base's new history
}

void check_inplace(Op id, const Tensor& self, const TensorList& others) {
  const char* op = op_name(id);
  if (!GradMode::is_enabled()) return;
  MG_CHECK(!(self.requires_grad() && self.is_leaf()), AutogradError, op,
           ": a leaf tensor that requires grad cannot be modified in place while grad mode is on; "
           "use NoGradGuard (as optimizers do) or an out-of-place op");
  const auto& base = self.impl()->view_base;
  if (!base || !(self.requires_grad() || autograd::any_requires_grad(others))) return;
  MG_CHECK(!(base->requires_grad && !base->grad_fn), AutogradError, op,
           ": a view of a leaf tensor that requires grad cannot be modified in place while grad mode is on; "
           "modify a clone() (x = x.clone(); x.slice(...).",
           op, "(...)), or the leaf under NoGradGuard");
  for (int64_t d = 0; d < self.dim(); ++d)
    MG_CHECK(self.stride(d) != 0 || self.size(d) <= 1, AutogradError, op,
             ": expected a view whose elements are distinct memory locations, got shape ", shape_str(self.shape()),
             " with stride 0 in dim ", d, " (an expanded view); modify a contiguous() copy instead");
}

}  // namespace detail

using namespace detail;

namespace {
// PyTorch's stride computation for view(): splits or merges dims where memory allows.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape) {
  if (old_shape.empty()) return Strides(shape.size(), 1);
  int64_t numel = numel_of(old_shape);
  if (numel == 0) return contiguous_strides(shape);
  Strides st(shape.size());
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}
}  // namespace

Tensor Tensor::view(const Shape& shape_) const {
  Shape s = infer_shape(shape_, numel(), "view");
  auto st = view_strides(shape(), strides(), s);
  MG_CHECK(st, ShapeError, "view: shape ", shape_str(s), " is not compatible with the strides of a tensor of shape ",
           shape_str(shape()), "; use reshape() (which copies when needed)");
  Shape in = shape();
  return make_view(Op::view, *this, s, *st, storage_offset(),
                   [in](const TensorList& g, const Node&) { return TensorList{g[0].reshape(in)}; });
}

Tensor Tensor::reshape(const Shape& shape_) const {
  Shape s = infer_shape(shape_, numel(), "reshape");
  if (view_strides(shape(), strides(), s)) return view(s);
  return contiguous().view(s);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  int64_t a = wrap_dim(d0, dim(), "transpose"), b = wrap_dim(d1, dim(), "transpose");
  Shape s = shape();
  Strides st = strides();
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return make_view(Op::transpose, *this, s, st, storage_offset(),
                   [a, b](const TensorList& g, const Node&) { return TensorList{g[0].transpose(a, b)}; });
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  MG_CHECK(int64_t(dims.size()) == dim(), ShapeError, "permute: expected ", dim(), " dims, got ", dims.size());
  Shape s(dims.size());
  Strides st(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    MG_CHECK(inverse[size_t(d)] < 0, IndexError, "permute: dim ", d, " appears twice");
    inverse[size_t(d)] = int64_t(i);
    s[i] = shape()[size_t(d)];
    st[i] = strides()[size_t(d)];
  }
  return make_view(Op::permute, *this, s, st, storage_offset(),
                   [inverse](const TensorList& g, const Node&) { return TensorList{g[0].permute(inverse)}; });
}

namespace {
// Backward of a view that picks part of its base: scatter the gradient into zeros.
autograd::BackwardFn embed_into_zeros(const Tensor& base, std::function<Tensor(const Tensor&)> pick) {
  Shape s = base.shape();
  DType t = base.dtype();
  Device d = base.device();
  return [s, t, d, pick](const TensorList& g, const Node&) {
    Tensor z = zeros_output(s, t, d);
    pick(z).copy_(g[0]);
    return TensorList{z};
  };
}
}  // namespace

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  MG_CHECK(dim() > 0, IndexError, "slice: expected a tensor with at least one dim, got a 0-d tensor");
  int64_t d = wrap_dim(dim_, dim(), "slice");
  MG_CHECK(step > 0, ValueError, "slice: expected a positive step, got ", step);
  int64_t n = shape()[size_t(d)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape();
  Strides st = strides();
  s[size_t(d)] = end == start ? 0 : (end - start - 1) / step + 1;  // no overflow for any step
  if (s[size_t(d)] > 1) st[size_t(d)] *= step;  // within the base's extent; a single element keeps any stride
  return make_view(Op::slice, *this, s, st, storage_offset() + start * strides()[size_t(d)],
                   embed_into_zeros(*this, [=](const Tensor& z) { return z.slice(d, start, end, step); }));
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  MG_CHECK(dim() > 0, IndexError, "narrow: expected a tensor with at least one dim, got a 0-d tensor");
  int64_t d = wrap_dim(dim_, dim(), "narrow"), n = shape()[size_t(d)];
  if (start < 0) start += n;
  MG_CHECK(start >= 0 && start <= n && length >= 0 && length <= n - start, IndexError,
           "narrow: expected start + length <= ", n, " along dim ", d, ", got start ", start, " and length ", length);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  MG_CHECK(dim() > 0, IndexError, "select: expected a tensor with at least one dim, got a 0-d tensor");
  int64_t d = wrap_dim(dim_, dim(), "select"), n = shape()[size_t(d)];
  MG_CHECK(index >= -n && index < n, IndexError, "select: expected an index in [", -n, ", ", n - 1, "] for dim ", d,
           ", got ", index);
  if (index < 0) index += n;
  Shape s = shape();
  Strides st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return make_view(Op::select, *this, s, st, storage_offset() + index * strides()[size_t(d)],
                   embed_into_zeros(*this, [=](const Tensor& z) { return z.select(d, index); }));
}

Tensor Tensor::expand(const Shape& shape_) const {
  MG_CHECK(shape_.size() >= shape().size(), ShapeError, "expand: expected at least ", dim(), " dims, got ",
           shape_str(shape_));
  size_t lead = shape_.size() - shape().size();
  Shape s(shape_.size());
  Strides st(shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (i < lead) {
      MG_CHECK(shape_[i] >= 0, ShapeError, "expand: new leading dims need explicit sizes, got ", shape_str(shape_));
      s[i] = shape_[i];
      st[i] = 0;
      continue;
    }
    int64_t have = shape()[i - lead], want = shape_[i] == -1 ? have : shape_[i];
    MG_CHECK(have == want || have == 1, ShapeError, "expand: cannot expand shape ", shape_str(shape()), " to ",
             shape_str(shape_), " (dim ", i, ": ", have, " vs ", want, ")");
    s[i] = want;
    st[i] = have == want ? strides()[i - lead] : 0;
  }
  if (s == shape()) return *this;
  Shape in = shape();
  return make_view(Op::expand, *this, s, st, storage_offset(),
                   [in](const TensorList& g, const Node&) { return TensorList{sum_to(g[0], in)}; });
}

Tensor Tensor::squeeze() const {
  Shape s;
  for (auto d : shape())
    if (d != 1) s.push_back(d);
  return s.size() == shape().size() ? *this : reshape(s);
}

Tensor Tensor::squeeze(int64_t dim_) const {
  if (dim() == 0) return *this;
  int64_t d = wrap_dim(dim_, dim(), "squeeze");
  if (shape()[size_t(d)] != 1) return *this;
  Shape s = shape();
  s.erase(s.begin() + d);
  return reshape(s);
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  int64_t d = wrap_dim(dim_, dim() + 1, "unsqueeze");
  Shape s = shape();
  Strides st = strides();
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, d < dim() ? st.empty() ? 1 : strides()[size_t(d)] * shape()[size_t(d)] : 1);
  Shape in = shape();
  return make_view(Op::unsqueeze, *this, s, st, storage_offset(),
                   [in](const TensorList& g, const Node&) { return TensorList{g[0].reshape(in)}; });
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t a = wrap_dim(start_dim, dim(), "flatten"), b = wrap_dim(end_dim, dim(), "flatten");
  MG_CHECK(a <= b, IndexError, "flatten: expected start_dim <= end_dim, got ", a, " and ", b);
  Shape s(shape().begin(), shape().begin() + a);
  int64_t m = 1;
  for (int64_t i = a; i <= b; ++i) m *= shape()[size_t(i)];
  s.push_back(m);
  s.insert(s.end(), shape().begin() + b + 1, shape().end());
  return reshape(s);
}

// ---- copies

Tensor Tensor::clone() const {
  OpScope op(Op::clone);
  Tensor out = new_output(shape(), dtype(), device());
  kernels::run(device(), &Backend::copy, *this, out);
  autograd::record(Op::clone, {*this}, {out}, [](const TensorList& g, const Node&) { return TensorList{g[0]}; });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  OpScope op(Op::to);
  Tensor out = new_output(shape(), t, device());
  kernels::run(device(), &Backend::copy, *this, out);
  DType in = dtype();
  if (is_floating(t))
    autograd::record(Op::to, {*this}, {out},
                     [in](const TensorList& g, const Node&) { return TensorList{g[0].to(in)}; });
  return out;
}

namespace {
// Copies the contiguous `src` into the contiguous `dst` across devices.
void transfer(const Tensor& src, const Tensor& dst) {
  if (src.is_meta() || dst.is_meta()) {
    MG_CHECK(dst.is_meta(), MetaTensorError, "to: a meta tensor has no values to copy to ", dst.device());
    return;
  }
  using cuda::CopyKind;
  const Device& s = src.device();
  const Device& d = dst.device();
  if (s.is_cpu() && d.is_cpu()) return kernels::run(s, &Backend::copy, src, dst);
  CopyKind kind = s.is_cpu() ? CopyKind::HostToDevice : d.is_cpu() ? CopyKind::DeviceToHost : CopyKind::DeviceToDevice;
  const Tensor& on_device = s.is_cuda() ? src : dst;
  cuda::copy(static_cast<char*>(dst.storage()->data()) + dst.storage_offset() * int64_t(dst.element_size()),
             static_cast<const char*>(src.storage()->data()) + src.storage_offset() * int64_t(src.element_size()),
             src.nbytes(), kind, on_device.device().index);
}
}  // namespace

Tensor Tensor::to(const Device& d) const {
  if (d == device()) return *this;
  check_device_usable(d);
  OpScope op(Op::to);
  Tensor src = contiguous();
  Tensor out = new_output(shape(), dtype(), d);
  transfer(src, out);
  Device in = device();
  autograd::record(Op::to, {*this}, {out}, [in](const TensorList& g, const Node&) { return TensorList{g[0].to(in)}; });
  return out;
}

Tensor Tensor::to(const Device& d, DType t) const { return to(d).to(t); }

// ---- in-place ops that only write

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(Op::copy_, *this, {src});
  MG_CHECK(broadcast_shapes(src.shape(), shape(), "copy_") == shape(), ShapeError, "copy_: cannot broadcast ",
           shape_str(src.shape()), " to ", shape_str(shape()));
  OpScope op(Op::copy_);
  Tensor s = src;
  if (src.device() != device()) {
    NoGradGuard ng;
    s = src.to(device());
  }
  kernels::run(device(), &Backend::copy, prepare(s, s.dtype(), shape()), *this);
  storage()->bump_version();
  Shape ss = src.shape();
  DType st = src.dtype();
  Device sd = src.device();
  record_inplace(Op::copy_, *this, {*this, src}, [ss, st, sd](const TensorList& g, const Node& n) {
    return TensorList{Tensor(), n.needs_input_grad(1) ? sum_to(g[0], ss).to(st).to(sd) : Tensor()};
  });
  return *this;
}

Tensor& Tensor::fill_(const Scalar& v) {
  check_inplace(Op::fill_, *this, {});
  kernels::run(device(), &Backend::fill, *this, v.value);
  storage()->bump_version();
  record_inplace(Op::fill_, *this, {*this}, [](const TensorList&, const Node&) { return TensorList{Tensor()}; });
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

}  // namespace mg
