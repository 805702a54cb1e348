// The ops autograd itself runs on gradients. Autograd sits below the ops, which record their
// backward into it, so it includes nothing of ops/: it names here the four it needs, and ops/
// defines them (ops/grad_math.cpp) as the ops of the same names, history included (create_graph).
#pragma once
#include <memgrad/core/tensor.h>

namespace mg::autograd::math {

Tensor add(const Tensor& a, const Tensor& b);        // two gradients of one tensor summed (mg::add)
Tensor sum_to(const Tensor& g, const Shape& shape);  // a broadcast input's gradient summed back (mg::sum_to)
// The gradient of an output no path used, and backward's seed (mg::zeros, mg::ones).
Tensor zeros(const Shape& shape, const TensorOptions& o);
Tensor ones(const Shape& shape, const TensorOptions& o);

}  // namespace mg::autograd::math
