// Cross-entropy kernels (loss.cu launches them; tests/cuda runs them on the host), fused with the
// softmax: one block per row of [N, C] logits computes the softmax statistics and the row sum in
// one pass.
#pragma once
#include <memgrad/kernels/cuda/device_common.cuh>
#include <memgrad/kernels/cuda/online_softmax.cuh>

namespace mg::cuda::loss_kernels {

// ---- cross-entropy: one block per row; softmax statistics and the row sum in one pass
// Softmax statistics of a row, with the class-weighted sum of its logits and the weights' sum.
template <class A>
struct CeStats {
  A m, s, total, wsum;
};
template <class A>
__device__ __forceinline__ CeStats<A> shfl_xor(CeStats<A> a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o),
          __shfl_xor_sync(0xffffffffu, a.total, o), __shfl_xor_sync(0xffffffffu, a.wsum, o)};
}
struct MergeCe {
  template <class A>
  __device__ __forceinline__ CeStats<A> operator()(CeStats<A> a, CeStats<A> b) const {
    MaxSum<A> ms = MergeMaxSum{}(MaxSum<A>{a.m, a.s}, MaxSum<A>{b.m, b.s});
    return {ms.m, ms.s, a.total + b.total, a.wsum + b.wsum};
  }
};

// Class weight c: weight[c], or 1 without weights.
template <class T, class A>
__device__ __forceinline__ A class_weight(const T* weight, int64_t c) {
  return weight ? A(dload(weight[c])) : A(1);
}

template <class T, class A>
__device__ __forceinline__ CeStats<A> row_stats(const T* row, const T* weight, int64_t C) {
  MG_SHARED(shared, CeStats<A>[32]);
  MaxSum<A> ms{-INFINITY, A(0)};
  A total = 0, wsum = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    A v = dload(row[c]), w = class_weight<T, A>(weight, c);
    push(ms, v);
    total += w * v;
    wsum += w;
  }
  return block_reduce(CeStats<A>{ms.m, ms.s, total, wsum}, MergeCe{}, shared);
}

template <class T, class L>
__global__ void cross_entropy_kernel(const T* x, const int64_t* target, const T* weight, L* loss, int64_t N, int64_t C,
                                     int64_t ignore_index, double smoothing) {
  using A = opmath_t<T>;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    int64_t t = target[n];
    if (t == ignore_index) {
      if (threadIdx.x == 0) loss[n] = dstore<L>(0.0);
      continue;
    }
    const T* row = x + n * C;
    CeStats<A> st = row_stats<T, A>(row, weight, C);
    if (threadIdx.x == 0) {
      double lse = double(st.m) + ::log(double(st.s));
      double nll = double(class_weight<T, A>(weight, t)) * (lse - double(dload(row[t])));
      double smooth = (double(st.wsum) * lse - double(st.total)) / double(C);  // mean of -w_c log p_c
      loss[n] = dstore<L>((1 - smoothing) * nll + smoothing * smooth);
    }
  }
}

template <class T, class L>
__global__ void cross_entropy_backward_kernel(const L* grad_loss, const T* x, const int64_t* target, const T* weight,
                                              T* gx, int64_t N, int64_t C, int64_t ignore_index, double smoothing) {
  using A = opmath_t<T>;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    int64_t t = target[n];
    T* grow = gx + n * C;
    if (t == ignore_index) {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) grow[c] = dstore<T>(0.0);
      continue;
    }
    const T* row = x + n * C;
    CeStats<A> st = row_stats<T, A>(row, weight, C);
    // d loss / d x_c = (1 - s) w_t (p_c - [c = t]) + s / C (sum(w) p_c - w_c)
    const A wt = class_weight<T, A>(weight, t);
    const A g = A(dload(grad_loss[n])), inv = A(1) / st.s, off = A(smoothing / double(C)), hit = A(1 - smoothing) * wt;
    const A coef = weight ? A(1 - smoothing) * wt + A(smoothing / double(C)) * st.wsum : A(1);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      A p = exp(A(dload(row[c])) - st.m) * inv;
      grow[c] = dstore<T>(g * (p * coef - off * class_weight<T, A>(weight, c) - (c == t ? hit : A(0))));
    }
  }
}

}  // namespace mg::cuda::loss_kernels
