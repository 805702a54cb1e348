// Adafactor's CUDA kernels (kernels/adafactor.h), in a header of their own so that tests/cuda can run
// them on the host, emulated, against the CPU kernel; adafactor.cu launches them in order, a few per
// tensor. Sums are float64 in a fixed order (grids depend on the sizes only).
#pragma once
#include <memgrad/kernels/adafactor.h>
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda::adafactor_kernels {

using namespace kernels::adafactor;

template <class T>
struct Tensors {
  T *p, *g, *r, *c, *m;  // c: col_var (null for a vector, where r is the variance); m: exp_avg or null
};

template <class T, class A = opmath_t<T>>
__device__ __forceinline__ A grad_at(const Tensors<T>& t, int64_t e, bool maximize) {
  const A g = dload(t.g[e]);
  return maximize ? -g : g;
}

// A block per row of every matrix (rows blockIdx.x, + gridDim.x, ...): row_var = lerp(row_var, mean_j g^2, w).
template <class T>
__global__ void rows_kernel(Tensors<T> t, Scalars s, int64_t rows) {
  MG_SHARED(shared, double[32]);
  const int64_t C = s.cols;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    double sum = 0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      const double g = grad_at(t, row * C + j, s.maximize);
      sum += g * g;
    }
    sum = block_reduce(sum, SumOp{}, shared);
    using A = opmath_t<T>;
    if (threadIdx.x == 0) t.r[row] = dstore<T>(lerp(A(dload(t.r[row])), A(sum / double(C)), A(s.weight)));
  }
}

// Column partial sums: block (column tile x, row chunks y, y + gridDim.y, ..., matrices z, z +
// gridDim.z, ...), a thread per column. The strides keep grids within CUDA's 65535 for y and z.
template <class T>
__global__ void column_partials_kernel(Tensors<T> t, Scalars s, double* partial, int64_t batch, int64_t chunks) {
  const int64_t R = s.rows, C = s.cols, j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= C) return;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z)
    for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
      double sum = 0;
      const int64_t last = (chunk + 1) * kColumnRows < R ? (chunk + 1) * kColumnRows : R;
      for (int64_t i = chunk * kColumnRows; i < last; ++i) {
        const double g = grad_at(t, (b * R + i) * C + j, s.maximize);
        sum += g * g;
      }
      partial[(b * chunks + chunk) * C + j] = sum;
    }
}

template <class T>
__global__ void columns_kernel(Tensors<T> t, Scalars s, const double* partial, int64_t chunks, int64_t count) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < count; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = k / s.cols, j = k % s.cols;
    double sum = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partial[(b * chunks + chunk) * s.cols + j];
    using A = opmath_t<T>;
    t.c[k] = dstore<T>(lerp(A(dload(t.c[k])), A(sum / double(s.rows)), A(s.weight)));
  }
}

// A block per matrix: its mean row factor, clamped to eps1.
template <class T>
__global__ void mean_row_kernel(Tensors<T> t, Scalars s, double* mean) {
  MG_SHARED(shared, double[32]);
  const int64_t b = blockIdx.x;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < s.rows; i += blockDim.x) sum += double(dload(t.r[b * s.rows + i]));
  sum = block_reduce(sum, SumOp{}, shared);
  if (threadIdx.x == 0) {
    using A = opmath_t<T>;
    const A m = A(sum / double(s.rows)), eps1 = A(s.eps1);
    mean[b] = m > eps1 ? m : eps1;
  }
}

// U's element e before clipping; a vector's variance is updated first (once per element).
template <class T, class A = opmath_t<T>>
__device__ __forceinline__ A u_at(const Tensors<T>& t, const Scalars& s, const double* mean, int64_t e,
                                  bool update_variance) {
  const A g = grad_at(t, e, s.maximize), eps1_sq = A(s.eps1 * s.eps1);
  if (!s.rows) {
    if (update_variance) t.r[e] = dstore<T>(lerp(A(dload(t.r[e])), g * g, A(s.weight)));
    return unclipped(g, A(dload(t.r[e])), eps1_sq);
  }
  const int64_t C = s.cols, row = e / C, b = row / s.rows;
  return unclipped(g, factored(A(dload(t.r[row])), A(dload(t.c[b * C + e % C])), A(mean[b])), eps1_sq);
}

// Block partial sums of U^2 (partial[k]) and p^2 (partial[blocks + k]) over a grid-stride loop.
template <class T>
__global__ void sums_kernel(Tensors<T> t, Scalars s, const double* mean, double* partial, int64_t n) {
  MG_SHARED(shared, double[32]);
  double u2 = 0, p2 = 0;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const double u = u_at(t, s, mean, e, true), p = dload(t.p[e]);
    u2 += u * u, p2 += p * p;
  }
  u2 = block_reduce(u2, SumOp{}, shared);
  p2 = block_reduce(p2, SumOp{}, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = u2, partial[gridDim.x + blockIdx.x] = p2;
}

__global__ void totals_kernel(const double* partial, int64_t blocks, double* totals) {
  if (threadIdx.x != 0) return;
  double u2 = 0, p2 = 0;
  for (int64_t k = 0; k < blocks; ++k) u2 += partial[k], p2 += partial[blocks + k];
  totals[0] = u2, totals[1] = p2;
}

template <class T>
__global__ void update_kernel(Tensors<T> t, Scalars s, const double* mean, const double* totals, int64_t n) {
  using A = opmath_t<T>;
  const Step<A> st = make_step<A>(s, totals[0], totals[1], n);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    A m = t.m ? A(dload(t.m[e])) : A(0);
    t.p[e] = dstore<T>(apply(A(dload(t.p[e])), u_at(t, s, mean, e, false), &m, st));
    if (t.m) t.m[e] = dstore<T>(m);
  }
}

// Where a tensor's float64 scratch (kernels/adafactor.h's scratch_elements) keeps what: the column
// partial sums [batch, chunks, cols], each matrix's mean row [batch], the block partial sums of U^2
// and p^2 [2, blocks], and their two totals.
struct Scratch {
  int64_t batch, chunks, blocks;
  double *column_partials, *mean, *partial, *totals;
  Scratch(double* scratch, int64_t n, const Scalars& s)
      : batch(s.rows ? n / (s.rows * s.cols) : 0),
        chunks((s.rows + kColumnRows - 1) / kColumnRows),
        blocks(sum_blocks(n)),
        column_partials(scratch),
        mean(column_partials + batch * chunks * s.cols),
        partial(mean + batch),
        totals(partial + 2 * blocks) {}
};

}  // namespace mg::cuda::adafactor_kernels
