// Algorithms along one line of a tensor, shared by the CPU and CUDA kernels: the gradient of a
// cumulative product, and the order sort uses.
#pragma once
#include <cstdint>

#include <memgrad/kernels/host_device.h>

namespace mg::kernels {

// grad_in[i] = sum_{j >= i} g[j] * d y[j] / d x[i] for y = cumprod(x) over a line of length r,
// read through x(k), y(k), g(k) and written by write(k, value). With z the first zero of x:
// before z it is (sum_{i <= j < z} g[j] y[j]) / x[i]; at z, y[z - 1] * sum_{j >= z} g[j] prod_{z < k <= j} x[k];
// after z, 0 (each y[j] there has two factors that vanish, or x[z] and no x[i]). O(r), no division by 0.
template <class X, class Y, class G, class W>
MG_HD void cumprod_grad_line(int64_t r, X x, Y y, G g, W write) {
  using A = decltype(x(0));
  int64_t z = 0;
  while (z < r && x(z) != A(0)) ++z;
  A acc = 0;
  for (int64_t i = z - 1; i >= 0; --i) {
    acc += g(i) * y(i);
    write(i, acc / x(i));
  }
  if (z == r) return;
  A prod = 1, sum = 0;
  for (int64_t j = z; j < r; ++j) {
    if (j > z) prod *= x(j);
    sum += g(j) * prod;
  }
  write(z, (z > 0 ? y(z - 1) : A(1)) * sum);
  for (int64_t i = z + 1; i < r; ++i) write(i, A(0));
}

// PyTorch's sort order: ascending with NaN after everything, or descending with NaN first. Equal
// values (and two NaNs) are ties, which sort keeps in their original order.
template <class A>
MG_HD bool sorts_before(A a, A b, bool descending) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan || b_nan) return descending ? a_nan && !b_nan : b_nan && !a_nan;
  return descending ? b < a : a < b;
}

}  // namespace mg::kernels
