// Helpers of the autograd suite's engine and hook tests: float64 tensors, exact comparisons, the
// message of an AutogradError, Activation bytes and gradcheck.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

namespace engine_test {

using mg::Tensor;
using TL = std::vector<Tensor>;

inline Tensor f64(const std::vector<double>& v, const mg::Shape& shape = {}) { return mg::tensor(v, shape); }

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Exact comparison of float64 values that are computed the same way on both sides.
inline void check_close(const Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  REQUIRE(got.defined());
  auto g = values(got);
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]).epsilon(tol));
}

// Runs `fn` and returns the AutogradError message it raises (fails the test when none is raised).
template <class F>
inline std::string autograd_error(F&& fn) {
  try {
    fn();
  } catch (const mg::AutogradError& e) {
    return e.what();
  }
  FAIL("expected an mg::AutogradError");
  return {};
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline int64_t activation_bytes() { return mg::memory_stats(mg::kCPU).category(mg::Category::Activation); }

inline void gradcheck_ok(const char* what, const std::function<Tensor(const TL&)>& fn, const TL& inputs) {
  INFO(std::string(what));
  auto r = mg::gradcheck(fn, inputs);
  std::string failure = std::string(what) + ": " + r.message;
  CHECK_MESSAGE(r.ok, failure);
}

}  // namespace engine_test
