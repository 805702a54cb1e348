// Float64 inputs for the autograd suite, drawn from a generator the test file seeds itself, so
// they neither depend on nor disturb mg's generator.
#pragma once
#include <random>
#include <vector>

#include <memgrad/memgrad.h>

// Uniform in [lo, hi), float64, not requiring grad.
inline mg::Tensor uniform_from(std::mt19937_64& g, const mg::Shape& shape, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(size_t(mg::numel_of(shape)));
  for (auto& x : v) x = d(g);
  return mg::tensor(v, shape);
}
