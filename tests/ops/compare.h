// Comparing a result with its reference, for the modes of the case list and the gpu tests: shape
// and dtype, then every element (floats within a tolerance, NaN where the reference is NaN, the
// same infinity; integers and bools exactly), naming the worst element when it fails.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op_case.h"

namespace mg::optest {

// Elements of `got` against `want` (the same count): floats within `tol`, integers exactly
// (compared as int64, which holds every integer a tensor can).
inline void expect_elements(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  REQUIRE_MESSAGE(got.numel() == want.numel(), what, ": ", got.numel(), " elements, expected ", want.numel());
  if (!is_floating(got.dtype()) && !is_floating(want.dtype())) {
    std::vector<int64_t> g = got.to(kCPU).to_vector<int64_t>(), w = want.to(kCPU).to_vector<int64_t>();
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] != w[i] && bad++ == 0) first = i;
    CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", g.size(), " elements differ; first at flat index ", first,
                  ": got ", g.empty() ? 0 : g[first], ", expected ", w.empty() ? 0 : w[first]);
    return;
  }
  std::vector<double> g = got.to(kCPU).to_vector<double>(), w = want.to(kCPU).to_vector<double>();
  double worst = 0;
  size_t at = 0, bad = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    double r = std::isnan(w[i]) ? (std::isnan(g[i]) ? 0 : INFINITY)
               : g[i] == w[i]   ? 0  // also equal infinities, whose difference is NaN
                                : std::fabs(g[i] - w[i]) / (tol.atol + tol.rtol * std::fabs(w[i]));
    if (!(r <= 1)) ++bad;
    if (!(r <= worst)) worst = r, at = i;
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", w.size(), " elements off by more than rtol ", tol.rtol, ", atol ",
                tol.atol, "; worst (", worst, "x the tolerance) at flat index ", at, ": got ", g.empty() ? 0.0 : g[at],
                ", expected ", w.empty() ? 0.0 : w[at]);
}

// Shape, dtype and elements.
inline void expect_close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  REQUIRE_MESSAGE(got.defined(), what, ": no tensor");
  CHECK_MESSAGE(got.shape() == want.shape(), what, ": shape ", shape_str(got.shape()), ", expected ",
                shape_str(want.shape()));
  CHECK_MESSAGE(got.dtype() == want.dtype(), what, ": dtype ", got.dtype(), ", expected ", want.dtype());
  if (got.shape() == want.shape()) expect_elements(got, want, tol, what);
}

inline void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  expect_close(got, want, {0, 0}, what);
}

}  // namespace mg::optest
