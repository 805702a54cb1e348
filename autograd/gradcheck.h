// Checks analytic gradients against central finite differences, in float64.
#pragma once
#include <functional>
#include <string>

#include <memgrad/core/tensor.h>

namespace mg {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // the first mismatch: input, element, output, both values
  explicit operator bool() const { return ok; }
};

// `fn` maps the inputs to one output of any shape. Every float64 input that requires grad is
// checked, element by element (inputs may be non-contiguous views).
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace mg
