// Row-wise CUDA kernels on a contiguous [outer, r, inner] view, along r: reductions, arg
// reductions, softmax (one pass with an online max), cross-entropy fused with its softmax, and
// layer norm. inner == 1 uses a block (or a warp) per row with shuffle reductions; inner > 1
// gives each thread a line, strided by `inner` so neighbouring threads read neighbouring bytes.
#include <cfloat>

#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

namespace {

constexpr int kThreads = 256;

// Accumulator: float for float32 and the 16-bit types, double for float64, int64 otherwise.
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, int64_t>;

template <class A>
__device__ __forceinline__ bool is_nan(A v) {
  return v != v;
}

struct Combine {
  ReduceOp op;
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    if (op == ReduceOp::Sum) return a + b;
    if (is_nan(a)) return a;  // NaN propagates
    if (is_nan(b)) return b;
    return op == ReduceOp::Max ? (a > b ? a : b) : (a < b ? a : b);
  }
};

template <class T, class O>
__global__ void reduce_rows_kernel(const T* x, O* out, int64_t rows, int64_t r, ReduceOp op) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  Combine c{op};
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = x + row * r;
    A acc = op == ReduceOp::Sum ? A(0) : A(dload(p[0]));
    for (int64_t k = threadIdx.x; k < r; k += blockDim.x) acc = c(acc, A(dload(p[k])));
    acc = block_reduce(acc, c, shared);
    if (threadIdx.x == 0) out[row] = dstore<O>(acc);
  }
}

// Blocks of 32 x 8 threads: x runs along inner (coalesced), y splits r; partial results meet in
// shared memory.
template <class T, class O>
__global__ void reduce_cols_kernel(const T* x, O* out, int64_t outer, int64_t r, int64_t inner, ReduceOp op) {
  using A = acc_t<T>;
  __shared__ A part[8][33];
  Combine c{op};
  const int64_t col_blocks = (inner + 31) / 32;
  for (int64_t b = blockIdx.x; b < outer * col_blocks; b += gridDim.x) {
    int64_t o = b / col_blocks, i = (b % col_blocks) * 32 + threadIdx.x;
    A acc = A(0);
    if (i < inner) {
      const T* p = x + o * r * inner + i;
      acc = op == ReduceOp::Sum ? A(0) : A(dload(p[0]));
      for (int64_t k = threadIdx.y; k < r; k += blockDim.y) acc = c(acc, A(dload(p[k * inner])));
    }
    __syncthreads();
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      for (int y = 1; y < int(blockDim.y); ++y) acc = c(acc, part[y][threadIdx.x]);
      out[o * inner + i] = dstore<O>(acc);
    }
  }
}

// (value, index) with the CPU's preference: NaN first, then the extreme, then the lower index.
template <class A>
struct Arg {
  A v;
  int64_t i;
};
template <class A>
__device__ __forceinline__ Arg<A> shfl_xor(Arg<A> a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.v, o), __shfl_xor_sync(0xffffffffu, a.i, o)};
}
struct ArgBetter {
  bool is_max;
  template <class A>
  __device__ __forceinline__ Arg<A> operator()(Arg<A> a, Arg<A> b) const {
    bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) return an && bn ? (a.i < b.i ? a : b) : (an ? a : b);
    if (a.v == b.v) return a.i < b.i ? a : b;
    return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
  }
};

template <class T>
__global__ void arg_reduce_kernel(const T* x, T* values, int64_t* indices, int64_t outer, int64_t r, int64_t inner,
                                  bool is_max) {
  using A = acc_t<T>;
  __shared__ Arg<A> shared[32];
  ArgBetter better{is_max};
  if (inner == 1) {  // a block per row
    for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
      const T* p = x + row * r;
      Arg<A> best{A(dload(p[0])), 0};
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) best = better(best, Arg<A>{A(dload(p[k])), k});
      best = block_reduce(best, better, shared);
      if (threadIdx.x == 0) {
        if (values) values[row] = p[best.i];
        indices[row] = best.i;
      }
    }
    return;
  }
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < outer * inner;
       l += int64_t(gridDim.x) * blockDim.x) {
    const T* p = x + (l / inner) * r * inner + l % inner;
    Arg<A> best{A(dload(p[0])), 0};
    for (int64_t k = 1; k < r; ++k) best = better(best, Arg<A>{A(dload(p[k * inner])), k});
    if (values) values[l] = p[best.i * inner];
    indices[l] = best.i;
  }
}

// ---- softmax: running (max, sum of exp(x - max)) merged across threads
template <class A>
struct MaxSum {
  A m, s;
};
template <class A>
__device__ __forceinline__ MaxSum<A> shfl_xor(MaxSum<A> a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)};
}
struct MergeMaxSum {
  template <class A>
  __device__ __forceinline__ MaxSum<A> operator()(MaxSum<A> a, MaxSum<A> b) const {
    A m = a.m > b.m ? a.m : b.m;
    if (m == -INFINITY) return {m, a.s + b.s};
    return {m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
  }
};
template <class A>
__device__ __forceinline__ void push(MaxSum<A>& ms, A v) {
  if (v > ms.m) {
    ms.s = ms.s * exp(ms.m - v) + A(1);
    ms.m = v;
  } else if (ms.m != -INFINITY) {  // -inf next to a -inf max adds nothing (and would give NaN)
    ms.s += exp(v - ms.m);
  }
}

template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t outer, int64_t r, int64_t inner, bool log) {
  using A = opmath_t<T>;
  __shared__ MaxSum<A> shared[32];
  if (inner == 1) {
    for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
      const T* p = x + row * r;
      MaxSum<A> ms{-INFINITY, A(0)};
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) push(ms, dload(p[k]));
      ms = block_reduce(ms, MergeMaxSum{}, shared);
      A log_sum = ::log(ms.s), inv = A(1) / ms.s;  // (x - max) - log_sum, as on the cpu
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) {
        A v = dload(p[k]);
        y[row * r + k] = dstore<T>(log ? (v - ms.m) - log_sum : exp(v - ms.m) * inv);
      }
    }
    return;
  }
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < outer * inner;
       l += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (l / inner) * r * inner + l % inner;
    MaxSum<A> ms{-INFINITY, A(0)};
    for (int64_t k = 0; k < r; ++k) push(ms, A(dload(x[base + k * inner])));
    A log_sum = ::log(ms.s), inv = A(1) / ms.s;  // (x - max) - log_sum, as on the cpu
    for (int64_t k = 0; k < r; ++k) {
      A v = dload(x[base + k * inner]);
      y[base + k * inner] = dstore<T>(log ? (v - ms.m) - log_sum : exp(v - ms.m) * inv);
    }
  }
}

template <class T>
__global__ void softmax_backward_kernel(const T* g, const T* y, T* gi, int64_t outer, int64_t r, int64_t inner,
                                        bool log) {
  using A = opmath_t<T>;
  __shared__ A shared[32];
  auto term = [log](A gv, A yv) { return log ? gv : gv * yv; };  // log_softmax: sum(g); softmax: sum(g * y)
  auto out = [log](A gv, A yv, A dot) { return log ? gv - exp(yv) * dot : yv * (gv - dot); };
  if (inner == 1) {
    for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
      const int64_t base = row * r;
      A dot = 0;
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x) dot += term(dload(g[base + k]), dload(y[base + k]));
      dot = block_reduce(dot, SumOp{}, shared);
      for (int64_t k = threadIdx.x; k < r; k += blockDim.x)
        gi[base + k] = dstore<T>(out(dload(g[base + k]), dload(y[base + k]), dot));
    }
    return;
  }
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < outer * inner;
       l += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (l / inner) * r * inner + l % inner;
    A dot = 0;
    for (int64_t k = 0; k < r; ++k) dot += term(dload(g[base + k * inner]), dload(y[base + k * inner]));
    for (int64_t k = 0; k < r; ++k) {
      int64_t j = base + k * inner;
      gi[j] = dstore<T>(out(dload(g[j]), dload(y[j]), dot));
    }
  }
}

// ---- cross-entropy: one block per row; softmax statistics and the row sum in one pass
template <class A>
struct CeStats {
  A m, s, total;
};
template <class A>
__device__ __forceinline__ CeStats<A> shfl_xor(CeStats<A> a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o),
          __shfl_xor_sync(0xffffffffu, a.total, o)};
}
struct MergeCe {
  template <class A>
  __device__ __forceinline__ CeStats<A> operator()(CeStats<A> a, CeStats<A> b) const {
    MaxSum<A> ms = MergeMaxSum{}(MaxSum<A>{a.m, a.s}, MaxSum<A>{b.m, b.s});
    return {ms.m, ms.s, a.total + b.total};
  }
};

template <class T, class A>
__device__ __forceinline__ CeStats<A> row_stats(const T* row, int64_t C) {
  __shared__ CeStats<A> shared[32];
  MaxSum<A> ms{-INFINITY, A(0)};
  A total = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    A v = dload(row[c]);
    push(ms, v);
    total += v;
  }
  return block_reduce(CeStats<A>{ms.m, ms.s, total}, MergeCe{}, shared);
}

template <class T, class L>
__global__ void cross_entropy_kernel(const T* x, const int64_t* target, L* loss, int64_t N, int64_t C,
                                     int64_t ignore_index, double smoothing) {
  using A = opmath_t<T>;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    int64_t t = target[n];
    if (t == ignore_index) {
      if (threadIdx.x == 0) loss[n] = dstore<L>(0.0);
      continue;
    }
    const T* row = x + n * C;
    CeStats<A> st = row_stats<T, A>(row, C);
    if (threadIdx.x == 0) {
      double lse = double(st.m) + ::log(double(st.s));
      double nll = lse - double(dload(row[t])), smooth = lse - double(st.total) / double(C);
      loss[n] = dstore<L>((1 - smoothing) * nll + smoothing * smooth);
    }
  }
}

template <class T, class L>
__global__ void cross_entropy_backward_kernel(const L* grad_loss, const T* x, const int64_t* target, T* gx, int64_t N,
                                              int64_t C, int64_t ignore_index, double smoothing) {
  using A = opmath_t<T>;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    int64_t t = target[n];
    T* grow = gx + n * C;
    if (t == ignore_index) {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) grow[c] = dstore<T>(0.0);
      continue;
    }
    const T* row = x + n * C;
    CeStats<A> st = row_stats<T, A>(row, C);
    A g = A(dload(grad_loss[n])), inv = A(1) / st.s, off = A(smoothing / double(C)), hit = A(1 - smoothing);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      A p = exp(A(dload(row[c])) - st.m) * inv;
      grow[c] = dstore<T>(g * (p - off - (c == t ? hit : A(0))));
    }
  }
}

// ---- layer norm. kWarpRow: a warp per row (8 rows per block), else a block per row.
template <bool kWarpRow, class A, class Op>
__device__ __forceinline__ A row_reduce(A v, Op op, A* shared) {
  if constexpr (kWarpRow)
    return warp_reduce(v, op);
  else
    return block_reduce(v, op, shared);
}

template <bool kWarpRow, class T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, float* mean, float* rstd, int64_t rows,
                                  int64_t n, double eps) {
  using A = opmath_t<T>;
  __shared__ A shared[32];
  const int lanes = kWarpRow ? 32 : blockDim.x, lane = kWarpRow ? threadIdx.x % 32 : threadIdx.x;
  const int64_t per_block = kWarpRow ? blockDim.x / 32 : 1;
  for (int64_t base = blockIdx.x * per_block; base < rows; base += int64_t(gridDim.x) * per_block) {
    int64_t i = base + (kWarpRow ? threadIdx.x / 32 : 0);
    if (i >= rows) continue;  // whole warps only (kWarpRow), so shuffles stay converged
    const T* row = x + i * n;
    A s = 0;
    for (int64_t j = lane; j < n; j += lanes) s += dload(row[j]);
    A mu = row_reduce<kWarpRow>(s, SumOp{}, shared) / A(n);
    A ss = 0;
    for (int64_t j = lane; j < n; j += lanes) {
      A d = dload(row[j]) - mu;
      ss += d * d;
    }
    A rs = A(1) / sqrt(row_reduce<kWarpRow>(ss, SumOp{}, shared) / A(n) + A(eps));
    if (lane == 0) mean[i] = float(mu), rstd[i] = float(rs);
    for (int64_t j = lane; j < n; j += lanes) {
      A v = (A(dload(row[j])) - mu) * rs;
      if (w) v *= dload(w[j]);
      if (b) v += dload(b[j]);
      y[i * n + j] = dstore<T>(v);
    }
  }
}

template <class A>
struct Pair {
  A a, b;
};
template <class A>
__device__ __forceinline__ Pair<A> shfl_xor(Pair<A> p, int o) {
  return {__shfl_xor_sync(0xffffffffu, p.a, o), __shfl_xor_sync(0xffffffffu, p.b, o)};
}
struct SumPair {
  template <class A>
  __device__ __forceinline__ Pair<A> operator()(Pair<A> x, Pair<A> y) const {
    return {x.a + y.a, x.b + y.b};
  }
};

template <class T>
__global__ void layer_norm_grad_x_kernel(const T* g, const T* x, const float* mean, const float* rstd, const T* w,
                                         T* gx, int64_t rows, int64_t n) {
  using A = opmath_t<T>;
  __shared__ Pair<A> shared[32];
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const T *row = x + i * n, *grow = g + i * n;
    A mu = mean[i], rs = rstd[i];
    Pair<A> acc{0, 0};
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      A gv = A(dload(grow[j])) * (w ? A(dload(w[j])) : A(1));
      acc.a += gv;
      acc.b += gv * (A(dload(row[j])) - mu) * rs;
    }
    acc = block_reduce(acc, SumPair{}, shared);
    A mean_g = acc.a / A(n), mean_gx = acc.b / A(n);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      A gv = A(dload(grow[j])) * (w ? A(dload(w[j])) : A(1));
      A xh = (A(dload(row[j])) - mu) * rs;
      gx[i * n + j] = dstore<T>(rs * (gv - mean_g - xh * mean_gx));
    }
  }
}

// Column sums over rows, blocks of 32 x 8 like reduce_cols_kernel.
template <class T>
__global__ void layer_norm_grad_wb_kernel(const T* g, const T* x, const float* mean, const float* rstd, T* gw, T* gb,
                                          int64_t rows, int64_t n) {
  using A = opmath_t<T>;
  __shared__ Pair<A> part[8][33];
  for (int64_t b = blockIdx.x; b < (n + 31) / 32; b += gridDim.x) {
    int64_t j = b * 32 + threadIdx.x;
    Pair<A> acc{0, 0};
    if (j < n)
      for (int64_t i = threadIdx.y; i < rows; i += blockDim.y) {
        A gv = dload(g[i * n + j]);
        acc.a += gv * (A(dload(x[i * n + j])) - A(mean[i])) * A(rstd[i]);
        acc.b += gv;
      }
    __syncthreads();
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
      for (int y = 1; y < int(blockDim.y); ++y) acc = SumPair{}(acc, part[y][threadIdx.x]);
      if (gw) gw[j] = dstore<T>(acc.a);
      if (gb) gb[j] = dstore<T>(acc.b);
    }
  }
}

const bool kRegistered = [] {
  register_kernel_variants("layer_norm", {"block", "warp"});
  return true;
}();

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    dispatch(out.dtype(), [&](auto ot) {
      using O = typename decltype(ot)::type;
      if (inner == 1)
        reduce_rows_kernel<<<grid_for(outer, 1), kThreads, 0, s>>>(dptr<T>(x), dptr<O>(out), outer, r, op);
      else
        reduce_cols_kernel<<<grid_for(outer * ((inner + 31) / 32), 1), dim3(32, 8), 0, s>>>(dptr<T>(x), dptr<O>(out),
                                                                                            outer, r, inner, op);
    });
  });
  check_launch("reduce");
}

void arg_reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer, int64_t r,
                int64_t inner) {
  if (indices.numel() == 0) return;
  cudaStream_t s = stream_for(indices);
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    int blocks = inner == 1 ? grid_for(outer, 1) : grid_for(outer * inner);
    arg_reduce_kernel<<<blocks, kThreads, 0, s>>>(dptr<T>(x), dptr_or_null<T>(values), dptr<int64_t>(indices), outer, r,
                                                  inner, op == ReduceOp::Max);
  });
  check_launch("arg_reduce");
}

void softmax(const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner, bool log) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch_floating(x.dtype(), "softmax", [&](auto xt) {
    using T = typename decltype(xt)::type;
    int blocks = inner == 1 ? grid_for(outer, 1) : grid_for(outer * inner);
    softmax_kernel<<<blocks, kThreads, 0, s>>>(dptr<T>(x), dptr<T>(out), outer, r, inner, log);
  });
  check_launch("softmax");
}

void softmax_backward(const Tensor& grad, const Tensor& out, const Tensor& grad_in, int64_t outer, int64_t r,
                      int64_t inner, bool log) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch_floating(out.dtype(), "softmax_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    int blocks = inner == 1 ? grid_for(outer, 1) : grid_for(outer * inner);
    softmax_backward_kernel<<<blocks, kThreads, 0, s>>>(dptr<T>(grad), dptr<T>(out), dptr<T>(grad_in), outer, r, inner,
                                                        log);
  });
  check_launch("softmax_backward");
}

void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& loss, int64_t ignore_index,
                   double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  check_indices("cross_entropy", target, C, ignore_index);
  if (N == 0) return;
  cudaStream_t s = stream_for(loss);
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto xt) {
    using T = typename decltype(xt)::type;
    dispatch_floating(loss.dtype(), "cross_entropy", [&](auto lt) {
      using L = typename decltype(lt)::type;
      cross_entropy_kernel<<<grid_for(N, 1), kThreads, 0, s>>>(dptr<T>(logits), dptr<int64_t>(target), dptr<L>(loss), N,
                                                               C, ignore_index, smoothing);
    });
  });
  check_launch("cross_entropy");
}

void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target,
                            const Tensor& grad_logits, int64_t ignore_index, double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  cudaStream_t s = stream_for(grad_logits);
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    dispatch_floating(grad_loss.dtype(), "cross_entropy_backward", [&](auto lt) {
      using L = typename decltype(lt)::type;
      cross_entropy_backward_kernel<<<grid_for(N, 1), kThreads, 0, s>>>(dptr<L>(grad_loss), dptr<T>(logits),
                                                                        dptr<int64_t>(target), dptr<T>(grad_logits), N,
                                                                        C, ignore_index, smoothing);
    });
  });
  check_launch("cross_entropy_backward");
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
                const Tensor& rstd, double eps) {
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / std::max<int64_t>(n, 1);
  if (rows == 0) return;
  cudaStream_t s = stream_for(out);
  const bool warp_row = kernel_variant_index("layer_norm") == 1;
  dispatch_floating(x.dtype(), "layer_norm", [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T *w = dptr_or_null<T>(weight), *b = dptr_or_null<T>(bias);
    if (warp_row)
      layer_norm_kernel<true><<<grid_for(rows, 8), 256, 0, s>>>(dptr<T>(x), w, b, dptr<T>(out), dptr<float>(mean),
                                                                dptr<float>(rstd), rows, n, eps);
    else
      layer_norm_kernel<false><<<grid_for(rows, 1), kThreads, 0, s>>>(dptr<T>(x), w, b, dptr<T>(out), dptr<float>(mean),
                                                                      dptr<float>(rstd), rows, n, eps);
  });
  check_launch("layer_norm");
}

void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / std::max<int64_t>(n, 1);
  cudaStream_t s = stream_for(x);
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T *g = dptr<T>(grad), *xp = dptr<T>(x);
    const float *mp = dptr<float>(mean), *rp = dptr<float>(rstd);
    if (grad_x.defined() && rows > 0)
      layer_norm_grad_x_kernel<<<grid_for(rows, 1), kThreads, 0, s>>>(g, xp, mp, rp, dptr_or_null<T>(weight),
                                                                      dptr<T>(grad_x), rows, n);
    if ((grad_weight.defined() || grad_bias.defined()) && n > 0)
      layer_norm_grad_wb_kernel<<<grid_for((n + 31) / 32, 1), dim3(32, 8), 0, s>>>(
          g, xp, mp, rp, dptr_or_null<T>(grad_weight), dptr_or_null<T>(grad_bias), rows, n);
  });
  check_launch("layer_norm_backward");
}

}  // namespace mg::cuda
