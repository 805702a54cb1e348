// Sorting along a dim: sort, argsort and topk (a full sort whose buffers are freed on return).
#include <memgrad/ops/op_util.h>

namespace mg {

using namespace detail;

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim_, bool descending) {
  OpScope scope(Op::sort);
  const int64_t dim = x.dim() ? wrap_dim(dim_, x.dim(), "sort") : 0;
  const std::vector<int64_t> dims = x.dim() ? std::vector<int64_t>{dim} : std::vector<int64_t>{};
  Layout l;
  {
    NoGradGuard ng;
    l = arrange(x, dims);
  }
  Tensor values = new_output(x.shape(), x.dtype(), x.device()), indices = new_output(x.shape(), kInt64, x.device());
  kernels::run(x.device(), &Backend::sort, l.x, values, indices, l.outer, l.r, l.inner, descending);
  if (autograd::any_requires_grad({x})) {
    SavedTensor si(indices);
    Shape in = x.shape();
    autograd::record(Op::sort, {x}, {values, indices}, [in, dim, si](const TensorList& g, const Node&) {
      return TensorList{scatter_add_into_zeros(in, dim, si.get(), g[0])};  // each value back to its place
    });
  }
  return {values, indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  NoGradGuard ng;  // indices have no gradient
  return std::get<1>(sort(x, dim, descending));
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim_, bool largest, bool sorted) {
  (void)sorted;  // always sorted: PyTorch leaves the order unspecified otherwise
  OpScope scope(Op::topk);
  const int64_t dim = x.dim() ? wrap_dim(dim_, x.dim(), "topk") : 0;
  const int64_t n = x.dim() ? x.size(dim) : 1;
  MG_CHECK(k >= 0 && k <= n, ValueError, "topk: expected k in [0, ", n, "] for dim ", dim, " of ", shape_str(x.shape()),
           ", got ", k);
  Tensor values, indices;
  {
    NoGradGuard ng;  // the full sort is scratch; only the k values and indices stay
    auto [v, i] = sort(x, dim, largest);
    values = x.dim() ? v.narrow(dim, 0, k).contiguous() : v;
    indices = x.dim() ? i.narrow(dim, 0, k).contiguous() : i;
  }
  if (autograd::any_requires_grad({x})) {
    SavedTensor si(indices);
    Shape in = x.shape();
    autograd::record(Op::topk, {x}, {values, indices}, [in, dim, si](const TensorList& g, const Node&) {
      return TensorList{scatter_add_into_zeros(in, dim, si.get(), g[0])};
    });
  }
  return {values, indices};
}

std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const { return mg::sort(*this, dim, descending); }
Tensor Tensor::argsort(int64_t dim, bool descending) const { return mg::argsort(*this, dim, descending); }
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return mg::topk(*this, k, dim, largest, sorted);
}

}  // namespace mg
