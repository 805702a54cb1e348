// Factories: tensors the user creates count as Input unless a MemoryScope says otherwise.
#include <cmath>

#include <memgrad/core/random.h>
#include <memgrad/ops/op_util.h>
#include <memgrad/ops/random_fill_impl.h>

namespace mg {

using namespace detail;

namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad_) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& o) {
  return finish(empty_with(shape, o.dtype_, o.device_, Category::Input), o);
}

Tensor full(const Shape& shape, const Scalar& value, const TensorOptions& o) {
  Tensor t = empty_with(shape, o.dtype_, o.device_, Category::Input);
  kernels::run(o.device_, &Backend::fill, t, value.value);
  return finish(t, o);
}
Tensor zeros(const Shape& shape, const TensorOptions& o) { return full(shape, 0, o); }
Tensor ones(const Shape& shape, const TensorOptions& o) { return full(shape, 1, o); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
Tensor full_like(const Tensor& t, const Scalar& v) { return full(t.shape(), v, t.options()); }
Tensor scalar_tensor(const Scalar& v, const TensorOptions& o) { return full({}, v, o); }

Tensor arange(const Scalar& end) { return arange(0, end, 1); }
Tensor arange(const Scalar& end, const TensorOptions& o) { return arange(0, end, 1, o); }
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step) {
  bool integral =
      start.kind != Scalar::Kind::Floating && end.kind != Scalar::Kind::Floating && step.kind != Scalar::Kind::Floating;
  return arange(start, end, step, integral ? kInt64 : kFloat32);
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& o) {
  MG_CHECK(step.value != 0, ValueError, "arange: expected a non-zero step, got 0");
  MG_CHECK((end.value - start.value) * step.value >= 0, ValueError, "arange: the step ", step.value,
           " does not go from ", start.value, " towards ", end.value);
  const double count = std::ceil((end.value - start.value) / step.value);
  MG_CHECK(count < 0x1p63, ShapeError, "arange: from ", start.value, " to ", end.value, " by ", step.value, " gives ",
           count, " elements, more than 2^63 - 1");
  const auto n = int64_t(count);
  Tensor t = empty_with({n}, o.dtype_, o.device_, Category::Input);
  kernels::run(o.device_, &Backend::fill_range, t, start.value, step.value);
  return finish(t, o);
}

Tensor linspace(double start, double end, int64_t steps, const TensorOptions& o) {
  MG_CHECK(steps >= 0, ValueError, "linspace: expected a non-negative number of steps, got ", steps);
  Tensor t = empty_with({steps}, o.dtype_, o.device_, Category::Input);
  double step = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  kernels::run(o.device_, &Backend::fill_range, t, start, step);
  return finish(t, o);
}

Tensor eye(int64_t n, const TensorOptions& o) {
  Tensor t = zeros({n, n}, TensorOptions(o).requires_grad(false));
  Tensor diagonal = make_tensor(t.storage(), {n}, {n + 1}, 0, t.dtype());  // strided view of the diagonal
  kernels::run(o.device_, &Backend::fill, diagonal, 1.0);
  return finish(t, o);
}

Tensor rand(const Shape& shape, const TensorOptions& o, Generator* generator) {
  MG_CHECK(is_floating(o.dtype_), DTypeError, "rand: expected a floating dtype, got ", o.dtype_);
  Tensor t = empty_with(shape, o.dtype_, o.device_, Category::Input);
  auto d = generator_or_default(generator).draw(uint64_t(t.numel()));
  kernels::run(o.device_, &Backend::uniform, t, d.seed, d.offset, 0.0, 1.0);
  return finish(t, o);
}

Tensor randn(const Shape& shape, const TensorOptions& o, Generator* generator) {
  MG_CHECK(is_floating(o.dtype_), DTypeError, "randn: expected a floating dtype, got ", o.dtype_);
  Tensor t = empty_with(shape, o.dtype_, o.device_, Category::Input);
  auto d = generator_or_default(generator).draw(2 * uint64_t(t.numel()));  // Box-Muller uses two words each
  kernels::run(o.device_, &Backend::normal, t, d.seed, d.offset, 0.0, 1.0);
  return finish(t, o);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& o, Generator* generator) {
  MG_CHECK(low < high, ValueError, "randint: expected low < high, got ", low, " and ", high);
  MG_CHECK(high - low <= (int64_t(1) << 32), ValueError, "randint: expected a range of at most 2^32, got ", high - low);
  Tensor t = empty_with(shape, o.dtype_, o.device_, Category::Input);
  auto d = generator_or_default(generator).draw(uint64_t(t.numel()));
  kernels::run(o.device_, &Backend::randint, t, d.seed, d.offset, low, high);
  return finish(t, o);
}

namespace {
// Draws `words` counters for t and fills it in place with kernel `fn` (uniform or normal).
template <class Fn>
Tensor& fill_random_(Op id, Tensor& t, uint64_t words, Generator* generator, Fn fn, double a, double b) {
  MG_CHECK(t.is_contiguous(), ValueError, op_name(id), ": expected a contiguous tensor");
  check_inplace(id, t, {});
  OpScope scope(id);
  auto d = generator_or_default(generator).draw(words);
  kernels::run(t.device(), fn, t, d.seed, d.offset, a, b);
  t.storage()->bump_version();
  record_inplace(id, t, {t}, [](const TensorList&, const Node&) { return TensorList{Tensor()}; });
  return t;
}
}  // namespace

Tensor& detail::uniform_(Tensor& t, double lo, double hi, Generator* generator) {
  return fill_random_(Op::uniform_, t, uint64_t(t.numel()), generator, &Backend::uniform, lo, hi);
}

Tensor& detail::normal_(Tensor& t, double mean, double std, Generator* generator) {  // Box-Muller: two words each
  return fill_random_(Op::normal_, t, 2 * uint64_t(t.numel()), generator, &Backend::normal, mean, std);
}

template <class T>
Tensor tensor(const std::vector<T>& data, const Shape& shape_, const TensorOptions& o) {
  Shape shape = shape_.empty() ? Shape{int64_t(data.size())} : shape_;
  MG_CHECK(numel_of(shape) == int64_t(data.size()), ShapeError, "tensor: shape ", shape_str(shape), " holds ",
           numel_of(shape), " elements, got ", data.size(), " values");
  Tensor host = empty_with(shape, o.dtype_, kCPU, Category::Input);
  char* p = static_cast<char*>(host.raw_data());
  for (size_t i = 0; i < data.size(); ++i) {
    if constexpr (std::is_integral_v<T>)  // exact: int64 beyond 2^53 does not survive a double
      if (o.dtype_ == kInt64) {
        reinterpret_cast<int64_t*>(p)[i] = int64_t(data[i]);
        continue;
      }
    detail::store_from_double(p + i * host.element_size(), o.dtype_, double(data[i]));
  }
  return finish(o.device_.is_cpu() ? host : host.to(o.device_), o);
}
template Tensor tensor<float>(const std::vector<float>&, const Shape&, const TensorOptions&);
template Tensor tensor<double>(const std::vector<double>&, const Shape&, const TensorOptions&);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, const Shape&, const TensorOptions&);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&, const TensorOptions&);
template Tensor tensor<bool>(const std::vector<bool>&, const Shape&, const TensorOptions&);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, const Shape&, const TensorOptions&);
template Tensor tensor<int8_t>(const std::vector<int8_t>&, const Shape&, const TensorOptions&);

// ---- whole-tensor comparisons

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  return a.to_vector<double>() == b.to_vector<double>();
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  Shape s = broadcast_shapes(a.shape(), b.shape(), "allclose");
  NoGradGuard ng;
  auto x = a.expand(s).to_vector<double>(), y = b.expand(s).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return false;
    if (x[i] == y[i]) continue;
    if (std::abs(x[i] - y[i]) > atol + rtol * std::abs(y[i])) return false;
  }
  return true;
}

}  // namespace mg
