// Cross-entropy fused with its softmax: one block per row of [N, C] logits computes the softmax
// statistics and the row sum in one pass.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/online_softmax.cuh>

namespace mg::cuda {

namespace {

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

}  // namespace

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

}  // namespace mg::cuda
