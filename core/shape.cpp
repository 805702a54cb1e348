#include <memgrad/core/shape.h>

#include <algorithm>

#include <memgrad/core/error.h>

namespace mg {

std::optional<int64_t> checked_numel(const Shape& s) {
  int64_t n = 1;
  bool overflow = false;
  for (auto d : s) {
    if (d == 0) return 0;  // also when the other sizes' product would overflow
    auto m = checked_mul(n, d);
    overflow |= !m;
    n = m.value_or(1);
  }
  if (overflow) return std::nullopt;
  return n;
}

int64_t numel_of(const Shape& s) {
  auto n = checked_numel(s);
  MG_CHECK(n, ShapeError, "shape ", shape_str(s), " has more than 2^63 - 1 elements");
  return *n;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    if (i == 0) break;
    auto next = checked_mul(acc, std::max<int64_t>(s[i], 1));
    MG_CHECK(next, ShapeError, "shape ", shape_str(s), ": the stride of dim ", i - 1, " overflows int64");
    acc = *next;
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  MG_CHECK(dim >= -n && dim < n, IndexError, op, ": expected dim in [", -n, ", ", n - 1, "], got ", dim);
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MG_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast (dim ", i, ": ", da, " vs ", db, ")");
    r[i] = da == 1 ? db : da;
  }
  return r;
}

std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> r;
  if (dims.empty()) {
    for (int64_t i = 0; i < ndim; ++i) r.push_back(i);
    return r;
  }
  for (auto d : dims) r.push_back(wrap_dim(d, ndim, op));
  std::sort(r.begin(), r.end());
  MG_CHECK(std::adjacent_find(r.begin(), r.end()) == r.end(), IndexError, op, ": a dim appears twice");
  if (ndim == 0) r.clear();
  return r;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape r;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    bool red = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!red)
      r.push_back(s[i]);
    else if (keepdim)
      r.push_back(1);
  }
  return r;
}

Shape infer_shape(Shape t, int64_t numel, const char* op) {
  int64_t infer = -1;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == -1) {
      MG_CHECK(infer < 0, ShapeError, op, ": only one dim can be -1, got ", shape_str(t));
      infer = int64_t(i);
    } else {
      MG_CHECK(t[i] >= 0, ShapeError, op, ": expected non-negative sizes, got ", shape_str(t));
    }
  }
  if (infer >= 0) {
    Shape known_dims = t;
    known_dims[size_t(infer)] = 1;
    const auto k = checked_numel(known_dims);
    MG_CHECK(k, ShapeError, op, ": shape ", shape_str(t), " has more than 2^63 - 1 elements");
    const int64_t known = *k;
    MG_CHECK(known > 0 && numel % known == 0, ShapeError, op, ": shape ", shape_str(t), " is invalid for ", numel,
             " elements");
    t[size_t(infer)] = numel / known;
  }
  MG_CHECK(numel_of(t) == numel, ShapeError, op, ": shape ", shape_str(t), " is invalid for ", numel, " elements");
  return t;
}

}  // namespace mg
