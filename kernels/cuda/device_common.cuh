// The device side of the CUDA kernels' building blocks: half/bfloat16 load/store (16-bit types
// compute in float), warp and block reductions. No launches and no atomics here, so a host compiler
// can read it too (tests/cuda emulates the attention kernels on the host).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <memgrad/core/dispatch.h>
#include <memgrad/kernels/host_device.h>

namespace mg::cuda {

using namespace mg::kernels;

// ---- element load/store: 16-bit types compute in float
template <class T>
__device__ __forceinline__ opmath_t<T> dload(const T& v) {
  if constexpr (std::is_same_v<T, Half>)
    return __half2float(__ushort_as_half(v.bits));
  else if constexpr (std::is_same_v<T, BFloat16>)
    return __bfloat162float(__ushort_as_bfloat16(v.bits));
  else
    return v;
}
template <class T, class V>
__device__ __forceinline__ T dstore(V v) {
  if constexpr (std::is_same_v<T, Half>)
    return Half{__half_as_ushort(__float2half_rn(float(v)))};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(float(v)))};
  else if constexpr (std::is_same_v<T, bool>)
    return v != V(0);
  else
    return T(v);
}

// ---- reductions across a warp and a block (blockDim.x a multiple of 32, at most 1024)
// Kernels overload shfl_xor for their own structs (found by argument-dependent lookup).
template <class T>
__device__ __forceinline__ T shfl_xor(T v, int o) {
  return __shfl_xor_sync(0xffffffffu, v, o);
}
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  return v;
}
// Every thread of the block gets the result. `shared` holds 32 T.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  v = warp_reduce(v, op);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = shared[0];
  for (int k = 1; k < warps; ++k) r = op(r, shared[k]);
  return r;
}

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

}  // namespace mg::cuda
