// Batch norm's kernels (norm.cu launches them; tests/cuda runs them on the host): per channel of a
// contiguous [N, C, S] view, a block per channel, forward and backward.
#pragma once
#include <memgrad/kernels/cuda/device_common.cuh>
#include <memgrad/kernels/cuda/layer_norm.cuh>

namespace mg::cuda::batch_norm_kernels {

using layer_norm_kernels::Pair;
using layer_norm_kernels::SumPair;

// ---- batch norm: a block per channel c, reducing over the N x S elements x[n, c, s].
template <class T>
using BnStat = std::conditional_t<std::is_same_v<T, double>, double, float>;  // statistics' type

__device__ __forceinline__ int64_t bn_index(int64_t j, int64_t c, int64_t C, int64_t S) {
  return (j / S * C + c) * S + j % S;
}

template <class T>
__global__ void batch_norm_kernel(const T* x, const T* w, const T* b, T* y, BnStat<T>* mean, BnStat<T>* var,
                                  BnStat<T>* rstd, int64_t N, int64_t C, int64_t S, bool training, double eps) {
  using A = BnStat<T>;
  MG_SHARED(shared, A[32]);
  const int64_t M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    A mu, v;         // training computes them (mean and var are outputs then), evaluation reads them
    if (training) {  // two passes: the mean, then the squared deviations from it
      A s = 0;
      for (int64_t j = threadIdx.x; j < M; j += blockDim.x) s += A(dload(x[bn_index(j, c, C, S)]));
      mu = block_reduce(s, SumOp{}, shared) / A(M);
      A ss = 0;
      for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
        const A d = A(dload(x[bn_index(j, c, C, S)])) - mu;
        ss += d * d;
      }
      v = block_reduce(ss, SumOp{}, shared) / A(M);
    } else {
      mu = mean[c], v = var[c];
    }
    const A rs = A(1) / sqrt(v + A(eps));
    if (threadIdx.x == 0) {
      if (training) mean[c] = mu, var[c] = v;
      rstd[c] = rs;
    }
    const A scale = rs * (w ? A(dload(w[c])) : A(1)), shift = b ? A(dload(b[c])) : A(0);
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t k = bn_index(j, c, C, S);
      y[k] = dstore<T>((A(dload(x[k])) - mu) * scale + shift);
    }
  }
}

template <class T>
__global__ void batch_norm_backward_kernel(const T* g, const T* x, const BnStat<T>* mean, const BnStat<T>* rstd,
                                           const T* w, T* gx, T* gw, T* gb, int64_t N, int64_t C, int64_t S,
                                           bool training) {
  using A = BnStat<T>;
  MG_SHARED(shared, Pair<A>[32]);
  const int64_t M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const A mu = mean[c], rs = rstd[c];
    Pair<A> acc{0, 0};  // sum(grad), sum(grad * xhat)
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t k = bn_index(j, c, C, S);
      const A gv = dload(g[k]);
      acc.a += gv;
      acc.b += gv * (A(dload(x[k])) - mu) * rs;
    }
    acc = block_reduce(acc, SumPair{}, shared);
    if (threadIdx.x == 0) {
      if (gw) gw[c] = dstore<T>(acc.b);
      if (gb) gb[c] = dstore<T>(acc.a);
    }
    if (!gx) continue;
    const A scale = rs * (w ? A(dload(w[c])) : A(1));
    const A mean_g = training ? acc.a / A(M) : A(0), mean_gx = training ? acc.b / A(M) : A(0);
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t k = bn_index(j, c, C, S);
      const A xh = (A(dload(x[k])) - mu) * rs;
      gx[k] = dstore<T>(scale * (A(dload(g[k])) - mean_g - xh * mean_gx));
    }
  }
}

}  // namespace mg::cuda::batch_norm_kernels
