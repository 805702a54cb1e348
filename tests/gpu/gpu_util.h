// Helpers of the gpu suite: compare a cuda result with the cpu reference, and run one function
// on both devices (forward and backward).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

namespace gpu_test {
using namespace mg;
inline const Device kGPU = cuda_device(0);

// Per-dtype tolerance: both devices compute 16-bit types in float and round once, so results
// agree to about one unit in the last place of the storage type.
struct Tol {
  double rtol, atol;
};
inline Tol tol_for(DType t) {
  switch (t) {
    case kFloat16:
      return {4e-3, 2e-3};
    case kBFloat16:
      return {3e-2, 1.6e-2};
    case kFloat64:
      return {1e-10, 1e-12};
    default:
      return {2e-5, 2e-6};
  }
}

// |got - want| <= atol + rtol * |want| everywhere (NaN where want is NaN, the same infinity where
// want is infinite), read back in float64.
inline void expect_close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", shape_str(got.shape()), " vs ",
                  shape_str(want.shape()));
  CHECK_MESSAGE(got.dtype() == want.dtype(), what, ": dtype");
  std::vector<double> g = got.to(kCPU).to(kFloat64).to_vector<double>();
  std::vector<double> w = want.to(kCPU).to(kFloat64).to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    double r = std::isnan(w[i]) ? (std::isnan(g[i]) ? 0 : INFINITY)
               : g[i] == w[i]   ? 0  // also equal infinities, whose difference is NaN
                                : std::fabs(g[i] - w[i]) / (tol.atol + tol.rtol * std::fabs(w[i]));
    if (!(r <= worst)) worst = r, at = i;
  }
  CHECK_MESSAGE(worst <= 1.0, what, ": worst error ", worst, " tolerances at element ", at, " (cuda ",
                g.empty() ? 0.0 : g[at], ", cpu ", w.empty() ? 0.0 : w[at], ")");
}

inline void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  expect_close(got, want, {0, 0}, what);
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs f on cpu copies and on cuda copies of `inputs`; compares the outputs and, when `grad`,
// the gradients of every floating input under the same random upstream gradient.
inline void parity(const std::string& name, const std::vector<Tensor>& inputs, const Fn& f, bool grad = true,
                   Tol tol = {-1, -1}) {
  std::vector<Tensor> c, g;
  for (const Tensor& t : inputs) {
    c.push_back(t.detach().clone());
    g.push_back(t.detach().to(kGPU));
    if (grad && is_floating(t.dtype())) c.back().requires_grad_(), g.back().requires_grad_();
  }
  Tensor yc = f(c), yg = f(g);
  CHECK_MESSAGE(yg.device() == kGPU, name, ": expected a cuda result");
  if (tol.rtol < 0) tol = tol_for(yc.dtype());
  expect_close(yg, yc, tol, name + " forward");
  if (!grad || !yc.requires_grad()) return;
  Tensor up = randn(yc.shape()).to(yc.dtype());
  yc.backward(up);
  yg.backward(up.to(kGPU));
  for (size_t i = 0; i < c.size(); ++i) {
    if (!c[i].requires_grad()) continue;
    REQUIRE_MESSAGE(g[i].grad().defined(), name, ": no cuda gradient for input ", i);
    // Backward sums over more terms than forward: allow a few more units in the last place.
    expect_close(g[i].grad(), c[i].grad(), {tol.rtol * 4, tol.atol * 4}, name + " grad of input " + std::to_string(i));
  }
}

inline Tensor randn_as(const Shape& s, DType t, double scale = 1.0) { return (randn(s) * scale).to(t); }

}  // namespace gpu_test
