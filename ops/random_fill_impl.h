// The in-place random fills nn::init runs (its uniform_, normal_ and their kaiming/xavier forms are
// the public face; these are their op entry points, in ops/factory.cpp). The contiguous floating t
// is filled with draws from U[lo, hi) or N(mean, std) of `generator` (the default one when null);
// no gradient flows through the old values. Outside ADL's reach (mg::detail), so that a call of
// nn::init's functions stays unambiguous.
#pragma once
#include <memgrad/core/random.h>
#include <memgrad/core/tensor.h>

namespace mg::detail {

Tensor& uniform_(Tensor& t, double lo, double hi, Generator* generator);
Tensor& normal_(Tensor& t, double mean, double std, Generator* generator);

}  // namespace mg::detail
