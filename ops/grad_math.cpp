// The ops autograd runs on gradients (autograd/grad_math.h): defined here, above autograd.
#include <memgrad/autograd/grad_math.h>
#include <memgrad/ops/ops.h>

namespace mg::autograd::math {

Tensor add(const Tensor& a, const Tensor& b) { return mg::add(a, b); }
Tensor sum_to(const Tensor& g, const Shape& shape) { return mg::sum_to(g, shape); }
Tensor zeros(const Shape& shape, const TensorOptions& o) { return mg::zeros(shape, o); }
Tensor ones(const Shape& shape, const TensorOptions& o) { return mg::ones(shape, o); }

}  // namespace mg::autograd::math
