#include <memgrad/autograd/gradcheck.h>

#include <cmath>

#include <memgrad/autograd/grad_math.h>
#include <memgrad/autograd/node.h>
#include <memgrad/core/grad_mode.h>

namespace mg {

namespace {
// Address of the i-th element (row-major logical order) of a float64 tensor.
double* element(const Tensor& t, int64_t i) {
  double* base = static_cast<double*>(t.raw_data());
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.shape()[size_t(d)]) * t.strides()[size_t(d)];
    i /= t.shape()[size_t(d)];
  }
  return base + off;
}
}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& o) {
  GradcheckResult r;
  std::vector<size_t> checked;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].defined() || !inputs[k].requires_grad()) continue;
    MG_CHECK(inputs[k].dtype() == kFloat64, DTypeError, "gradcheck: expected float64 inputs, got ", inputs[k].dtype(),
             " for input ", k);
    MG_CHECK(inputs[k].is_leaf(), ValueError,
             "gradcheck: expected leaf inputs (gradients accumulate only in "
             "leaves), got input ",
             k, " computed by ", inputs[k].grad_fn()->name());
    checked.push_back(k);
  }
  MG_CHECK(!checked.empty(), ValueError, "gradcheck: expected at least one input that requires grad, got none");

  Tensor y = fn(inputs);
  MG_CHECK(is_floating(y.dtype()), DTypeError, "gradcheck: expected a floating output, got ", y.dtype());
  const int64_t m = y.numel();
  // analytic[k][j * n_k + i] = d y_j / d x_k[i], one backward per output element
  std::vector<std::vector<double>> analytic(inputs.size());
  for (auto k : checked) analytic[k].assign(size_t(m * inputs[k].numel()), 0.0);
  for (int64_t j = 0; j < m; ++j) {
    for (auto k : checked) inputs[k].set_grad(Tensor());
    Tensor seed = autograd::math::zeros(y.shape(), TensorOptions(y.dtype()));
    element(seed, j)[0] = 1.0;
    if (!y.requires_grad()) break;
    y.backward(seed, true);
    for (auto k : checked) {
      Tensor g = inputs[k].grad();
      if (!g.defined()) continue;
      auto v = g.to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i) analytic[k][size_t(j) * v.size() + i] = v[i];
    }
  }
  for (auto k : checked) inputs[k].set_grad(Tensor());

  NoGradGuard ng;
  for (auto k : checked) {
    const int64_t n = inputs[k].numel();
    for (int64_t i = 0; i < n; ++i) {
      double* p = element(inputs[k], i);
      double orig = *p;
      *p = orig + o.eps;
      auto plus = fn(inputs).to(kFloat64).to_vector<double>();
      *p = orig - o.eps;
      auto minus = fn(inputs).to(kFloat64).to_vector<double>();
      *p = orig;
      for (int64_t j = 0; j < m; ++j) {
        double num = (plus[size_t(j)] - minus[size_t(j)]) / (2 * o.eps), ana = analytic[k][size_t(j * n + i)];
        double err = std::abs(num - ana);
        r.max_abs_error = std::max(r.max_abs_error, err);
        if (r.ok && !(err <= o.atol + o.rtol * std::abs(num))) {
          r.ok = false;
          r.message = detail::str("gradcheck: input ", k, " element ", i, ", output element ", j, ": analytic ", ana,
                                  ", numeric ", num);
        }
      }
    }
  }
  return r;
}

}  // namespace mg
