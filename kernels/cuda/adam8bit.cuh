// The 8-bit Adam kernels (bitsandbytes' block-wise scheme, kernels/quantize8bit.h), in a header of
// their own so that tests/cuda can run them on the host, emulated, against the CPU kernel.
// quantized_kernel: a block of 256 threads per quantization block, one element each, the block's new
// absmax by a block reduction; the dynamic maps travel in the kernel arguments (4 KiB, within CUDA
// 12.1's 32 KiB) and are copied to shared memory, where the nearest-code searches read them.
// full_kernel: tensors below the 8-bit threshold, an element-wise loop over float32 moments.
#pragma once
#include <memgrad/kernels/quantize8bit.h>
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda::adam8bit {

using namespace kernels::quant;

struct Maps {
  DynamicMap m, v;  // signed for exp_avg, unsigned for exp_avg_sq
};

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class T>
__global__ void __launch_bounds__(kBlock)
    quantized_kernel(const __grid_constant__ Maps maps, T* p, const T* g, uint8_t* cm, uint8_t* cv, float* am,
                     float* av, int64_t n, const Adam8bitCoeffs c) {
  MG_SHARED(s, Maps);
  MG_SHARED(reduce, float[32]);
  for (int i = threadIdx.x; i < kCodes; i += blockDim.x) {
    s.m.value[i] = maps.m.value[i], s.m.mid[i] = maps.m.mid[i];
    s.v.value[i] = maps.v.value[i], s.v.mid[i] = maps.v.mid[i];
  }
  if (threadIdx.x == 0) s.m.negatives = maps.m.negatives, s.v.negatives = maps.v.negatives;  // keep_sign reads it
  __syncthreads();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t e = b * kBlock + threadIdx.x;
    const bool in = e < n;
    float m = 0, v = 0;
    if (in) {
      const float gi = dload(g[e]);
      m = s.m.value[cm[e]] * am[b], v = s.v.value[cv[e]] * av[b];
      if (isfinite(gi)) {
        adam8bit_moments(gi, m, v, c);
        p[e] = dstore<T>(adam8bit_param(float(dload(p[e])), m, v, c));
      } else {  // as bitsandbytes: the moments of a non-finite gradient restart, its parameter stays
        m = v = 0;
      }
    }
    const float max_m = block_reduce(fabsf(m), MaxOp{}, reduce), max_v = block_reduce(fabsf(v), MaxOp{}, reduce);
    if (in) {
      cm[e] = quantize_signed(s.m, m, max_m);
      cv[e] = quantize_unsigned(s.v, v, max_v);
    }
    if (threadIdx.x == 0) am[b] = max_m, av[b] = max_v;  // every thread read them before the reductions
  }
}

template <class T>
__global__ void full_kernel(T* p, const T* g, float* m, float* v, int64_t n, const Adam8bitCoeffs c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float mi = m[i], vi = v[i];
    adam8bit_moments(float(dload(g[i])), mi, vi, c);
    p[i] = dstore<T>(adam8bit_param(float(dload(p[i])), mi, vi, c));
    m[i] = mi, v[i] = vi;
  }
}

}  // namespace mg::cuda::adam8bit
