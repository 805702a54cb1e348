// Adafactor's step (Shazeer & Stern 2018) as torch.optim.Adafactor (PyTorch 2.5+) computes it, with
// the paper's optional first moment: the per-tensor constants and the element formulas shared by
// the CPU kernel (kernels/cpu/adafactor.cpp) and the CUDA kernels (kernels/cuda/adafactor.cu).
//
// For a gradient G viewed as matrices [R, C] (its last two dims; a vector is not factored):
//   row_var = lerp(row_var, mean_j G^2, w), col_var = lerp(col_var, mean_i G^2, w), w = t^beta2_decay
//   V = row_var col_var / max(mean_i row_var, eps1)       (a vector: V = variance = lerp(variance, G^2, w))
//   U = G / sqrt(max(V, eps1^2)),  U /= max(1, RMS(U) / d)                         (update clipping)
//   alpha = max(eps2, RMS(p)) * min(lr, 1 / sqrt(t))                               (relative step)
//   p *= 1 - lr * weight_decay;  p -= alpha * U   (with beta1 > 0: m = beta1 m + (1 - beta1) U, p -= alpha * m)
// The sums (of G^2 over rows and columns, of U^2 and of p^2) are taken in float64 in a fixed order,
// so each device's result does not depend on its thread count; the rest is in the parameter's
// arithmetic type as torch's.
#pragma once
#include <cstdint>

#include <memgrad/kernels/host_device.h>
#include <memgrad/kernels/update_rules.h>  // sqrt_of

namespace mg::kernels::adafactor {

using rules::sqrt_of;

struct Scalars {
  double lr, rho;  // rho = min(lr, 1 / sqrt(t))
  double weight;   // w = t^beta2_decay, the second moment's lerp weight (1 - beta2_t)
  double eps1;     // resolved: the parameter dtype's epsilon when the option is unset
  double eps2, d, weight_decay, beta1;
  bool maximize;
  int64_t rows = 0, cols = 0;  // the factored matrices' shape; 0 for a vector (not factored)
};

// The element formulas in A, the parameter's arithmetic type (float for float32 and the 16-bit
// types, double for float64), as torch computes them in the parameter's dtype.
// torch.lerp's formula (start + w (end - start) for |w| < 0.5, else end - (end - start)(1 - w)).
template <class A>
MG_HD A lerp(A start, A end, A w) {
  return (w < A(0.5) && w > A(-0.5)) ? start + w * (end - start) : end - (end - start) * (A(1) - w);
}
// An element of U before clipping: g / sqrt(max(variance estimate, eps1^2)).
template <class A>
MG_HD A unclipped(A g, A variance, A eps1_sq) {
  return (A(1) / sqrt_of(variance > eps1_sq ? variance : eps1_sq)) * g;
}
// The factored variance estimate of element (i, j): row_i col_j / mean_row.
template <class A>
MG_HD A factored(A row, A col, A mean_row) {
  return (row * col) / mean_row;
}

// The parameter's new value from its decayed value, the update and the first moment (m may be
// null): `scale` = -alpha / clip without a first moment, and m takes U / clip with it.
template <class A>
struct Step {
  A decay, scale, alpha, inv_clip, beta1, one_minus_beta1;
  bool decayed, momentum;
};
template <class A>
MG_HD A apply(A p, A u, A* m, const Step<A>& s) {
  const A pd = s.decayed ? p * s.decay : p;
  if (!s.momentum) return pd + s.scale * u;
  *m = s.beta1 * *m + s.one_minus_beta1 * (u * s.inv_clip);
  return pd - s.alpha * *m;
}
// Host and device: the step from the sums (float64) of U^2 and of p^2 over the tensor's n elements.
template <class A>
MG_HD Step<A> make_step(const Scalars& s, double sum_u2, double sum_p2, int64_t n) {
  const double rms_u = sqrt_of(sum_u2 / double(n)), rms_p = sqrt_of(sum_p2 / double(n));
  const double clip = rms_u / s.d > 1 ? rms_u / s.d : 1.0;
  const double alpha = (rms_p > s.eps2 ? rms_p : s.eps2) * s.rho;
  Step<A> r;
  r.decay = A(1 - s.lr * s.weight_decay), r.decayed = s.weight_decay != 0;
  r.scale = A(-alpha / clip), r.alpha = A(alpha), r.inv_clip = A(1 / clip);
  r.beta1 = A(s.beta1), r.one_minus_beta1 = A(1 - s.beta1), r.momentum = s.beta1 > 0;
  return r;
}

// Float64 scratch the CUDA kernels use for a tensor of n elements as `batch` matrices [rows, cols]
// (rows = 0: a vector): column partial sums, each matrix's mean row, block partial sums of U^2 and
// p^2, and the two totals. kernels/cuda/scratch.cpp books the same for plans.
inline constexpr int64_t kColumnRows = 256;  // rows a block sums per column partial
inline constexpr int64_t kSumBlocks = 1024;  // the most blocks a tensor-wide sum uses
inline int64_t sum_blocks(int64_t n) { return n / 256 + 1 < kSumBlocks ? n / 256 + 1 : kSumBlocks; }
inline int64_t scratch_elements(int64_t n, int64_t rows, int64_t cols) {
  const int64_t batch = rows ? n / (rows * cols) : 0;
  const int64_t column_partials = rows ? batch * ((rows + kColumnRows - 1) / kColumnRows) * cols : 0;
  return column_partials + batch + 2 * sum_blocks(n) + 2;
}

}  // namespace mg::kernels::adafactor
