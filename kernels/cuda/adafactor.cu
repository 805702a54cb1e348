// Adafactor (kernels/adafactor.h), a few launches per tensor on its stream: the row factors (a block
// per row), the column factors (column partial sums over chunks of rows, then a pass adding them in
// order), each matrix's mean row, the block partial sums of U^2 and p^2, their totals, and the
// update. Sums are float64 in a fixed order (grids depend on the sizes only), so results repeat
// exactly from run to run. The float64 scratch comes from adafactor_update_scratch (scratch.cpp), which
// a plan for cuda books on meta too.
#include <memgrad/kernels/adafactor.h>
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

namespace {

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

// A block per row of every matrix: row_var = lerp(row_var, mean_j g^2, w).
template <class T>
__global__ void rows_kernel(Tensors<T> t, Scalars s) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x, C = s.cols;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
    const double g = grad_at(t, row * C + j, s.maximize);
    sum += g * g;
  }
  sum = block_reduce(sum, SumOp{}, shared);
  using A = opmath_t<T>;
  if (threadIdx.x == 0) t.r[row] = dstore<T>(lerp(A(dload(t.r[row])), A(sum / double(C)), A(s.weight)));
}

// Column partial sums: block (column tile x, row chunk y, matrices z, z + gridDim.z, ...), a thread
// per column.
template <class T>
__global__ void column_partials_kernel(Tensors<T> t, Scalars s, double* partial, int64_t batch) {
  const int64_t R = s.rows, C = s.cols, j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, chunk = blockIdx.y,
                chunks = gridDim.y;
  if (j >= C) return;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
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
  __shared__ double shared[32];
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
  __shared__ double shared[32];
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

template <class T>
void step_tensor(const Tensors<T>& t, int64_t n, const Scalars& s, double* scratch, cudaStream_t stream) {
  const int64_t R = s.rows, C = s.cols, batch = R ? n / (R * C) : 0, chunks = (R + kColumnRows - 1) / kColumnRows;
  double* column_partials = scratch;
  double* mean = column_partials + batch * chunks * C;
  double* partial = mean + batch;
  const int64_t blocks = sum_blocks(n);
  double* totals = partial + 2 * blocks;
  if (R) {
    rows_kernel<<<unsigned(batch * R), kThreads, 0, stream>>>(t, s);
    const dim3 grid(unsigned((C + kThreads - 1) / kThreads), unsigned(chunks),
                    unsigned(std::min<int64_t>(batch, 65535)));
    column_partials_kernel<<<grid, kThreads, 0, stream>>>(t, s, column_partials, batch);
    columns_kernel<<<grid_for(batch * C), kThreads, 0, stream>>>(t, s, column_partials, chunks, batch * C);
    mean_row_kernel<<<unsigned(batch), kThreads, 0, stream>>>(t, s, mean);
  }
  sums_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(t, s, mean, partial, n);
  totals_kernel<<<1, 32, 0, stream>>>(partial, blocks, totals);
  update_kernel<<<grid_for(n), kThreads, 0, stream>>>(t, s, mean, totals, n);
  check_launch("Adafactor");
}

}  // namespace

void adafactor_update(const TensorLists& lists, const std::vector<adafactor::Scalars>& scalars) {
  const Tensor scratch = adafactor_update_scratch(lists, scalars)[0];  // each tensor's in turn, on one stream
  for (size_t j = 0; j < scalars.size(); ++j) {
    const Tensor& p = lists[0][j];
    const int64_t n = p.numel();
    if (n == 0) continue;
    const Scalars& s = scalars[j];
    dispatch_floating(p.dtype(), "Adafactor", [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto opt = [&](size_t k) { return lists[k][j].defined() ? dptr<T>(lists[k][j]) : nullptr; };
      step_tensor(Tensors<T>{dptr<T>(p), dptr<T>(lists[1][j]), opt(2), opt(3), opt(4)}, n, s, dptr<double>(scratch),
                  stream_for(p));
    });
  }
}

}  // namespace mg::cuda
