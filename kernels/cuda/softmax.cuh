// Softmax kernels (softmax.cu launches them; tests/cuda runs them on the host): softmax and
// log-softmax along r of a contiguous [outer, r, inner] view in one pass with an online max
// (online_softmax.cuh), their backward, and the attention scores' scaled, masked softmax.
#pragma once
#include <memgrad/kernels/backend.h>
#include <memgrad/kernels/cuda/device_common.cuh>
#include <memgrad/kernels/cuda/online_softmax.cuh>

namespace mg::cuda::softmax_kernels {

template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t outer, int64_t r, int64_t inner, bool log) {
  using A = opmath_t<T>;
  MG_SHARED(shared, MaxSum<A>[32]);
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
  MG_SHARED(shared, A[32]);
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

// softmax(scale * x + mask) of row (bh, i) of [BH, Tq, Tk], a block per row: the masked score is
// recomputed in the second pass rather than stored.
template <class T>
__global__ void scaled_masked_softmax_kernel(const T* x, const void* mask, T* y, int64_t BH, int64_t Tq, int64_t Tk,
                                             double scale, bool causal, AttentionMask m) {
  using A = opmath_t<T>;
  using Kind = AttentionMask::Kind;
  MG_SHARED(shared, MaxSum<A>[32]);
  for (int64_t row = blockIdx.x; row < BH * Tq; row += gridDim.x) {
    const int64_t bh = row / Tq, i = row % Tq, mask_row = m.kind == Kind::None ? 0 : m.offset(bh, i, 0);
    const T* p = x + row * Tk;
    auto score = [&](int64_t k) {
      A s = dload(dstore<T>(dload(p[k]) * A(scale)));
      if (causal && k > i) s = A(-INFINITY);
      const int64_t at = mask_row + k * m.stride_k;
      if (m.kind == Kind::Bool) s = static_cast<const bool*>(mask)[at] ? s : A(-INFINITY);
      if (m.kind == Kind::Additive) s = dload(dstore<T>(s + dload(static_cast<const T*>(mask)[at])));
      return s;
    };
    MaxSum<A> ms{-INFINITY, A(0)};
    for (int64_t k = threadIdx.x; k < Tk; k += blockDim.x) push(ms, score(k));
    ms = block_reduce(ms, MergeMaxSum{}, shared);
    const A inv = A(1) / ms.s;
    for (int64_t k = threadIdx.x; k < Tk; k += blockDim.x) y[row * Tk + k] = dstore<T>(exp(score(k) - ms.m) * inv);
  }
}

}  // namespace mg::cuda::softmax_kernels
