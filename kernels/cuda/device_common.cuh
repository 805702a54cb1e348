// The device side of the CUDA kernels' building blocks: shared memory declarations, half/bfloat16
// load/store (16-bit types compute in float), warp and block reductions, atomic adds for every dtype.
// No launches here: the kernels' headers (*.cuh) include it, and so does tests/cuda, which runs
// every kernel on the host (emulated_device.h defines the intrinsics and atomics a host compiler lacks).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <memgrad/core/dispatch.h>
#include <memgrad/kernels/host_device.h>

namespace mg::cuda {

using namespace mg::kernels;

#if !defined(__CUDACC__)
// A host compiler (tests/cuda runs the kernels on the host) takes the math library from std:: (float
// overloads for float, as on the device), ahead of memgrad's ops of the same names (mg::exp, mg::min).
using std::erf;
using std::exp;
using std::log;
using std::max;
using std::min;
using std::pow;
using std::sqrt;
using std::tanh;
#endif

// ---- shared memory: MG_SHARED(name, type) declares a block's `type name` (`MG_SHARED(partial,
// float[8][33])`), MG_DYNAMIC_SHARED(name) the launch's dynamic bytes as `unsigned char name[]`.
// The host emulation defines them first, to see every access and its bounds.
#ifndef MG_SHARED
template <class T>
using shared_type = T;
#define MG_SHARED(name, ...) __shared__ ::mg::cuda::shared_type<__VA_ARGS__> name
#define MG_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// Threads per block of most kernels (the row kernels: a block per row).
constexpr int kThreads = 256;

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
// Every thread of the block gets the result. `shared` holds 32 T (MG_SHARED(shared, T[32])).
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

// ---- atomic add for every dtype (8-bit integers through compare-and-swap on their 32-bit word)
template <class T>
__device__ __forceinline__ void atomic_add(T* p, opmath_t<T> v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t>) {
    atomicAdd(p, v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, Half>) {
    atomicAdd(reinterpret_cast<__half*>(p), __float2half_rn(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __float2bfloat16_rn(v));
  } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {  // wraps, as the CPU's add
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
    const unsigned int shift = 8u * unsigned(a & 3), add = unsigned(v) & 0xffu;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      const unsigned int byte = ((assumed >> shift) + add) & 0xffu;
      old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
    } while (old != assumed);
  } else {  // bool: x + v != 0 is a logical or
    if (!v) return;
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
    atomicOr(word, 1u << (8 * (a & 3)));
  }
}

}  // namespace mg::cuda
