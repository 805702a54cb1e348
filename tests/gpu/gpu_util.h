// Helpers of the gpu suite: compare a cuda result with the cpu reference, and run one function
// on both devices (forward and backward).
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

#include "ops/compare.h"

namespace gpu_test {
using namespace mg;
inline const Device kGPU = cuda_device(0);

// Tolerances and comparisons shared with the case list's modes.
using optest::expect_close;
using optest::expect_equal;
using optest::Tol;
using optest::tol_for;

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
