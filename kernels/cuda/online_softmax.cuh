// Running softmax statistics, (max, sum of exp(x - max)), merged across threads in one pass over
// a row: shared by the softmax and cross-entropy kernels.
#pragma once
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda {

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

}  // namespace mg::cuda
