// The multi-tensor kernel and its element functions (multi_tensor.cu launches it; tests/cuda runs it
// on the host). A batch travels in the kernel arguments: operand pointers, sizes, cumulative chunk
// counts and per-tensor scalars of up to Batch::kMax tensors of one dtype. Each block walks chunks of
// kChunk elements across the batch, so one launch covers tensors of any mix of sizes; the batch is a
// __grid_constant__ argument, read in place rather than copied per thread. The element math is
// kernels/update_rules.h, the same functions the CPU backend calls; the SGD and Adam steps also read
// half gradients of float32 parameters.
#pragma once
#include <memgrad/kernels/update_rules.h>
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda::multi_tensor_kernels {

constexpr int64_t kChunk = 16384;   // elements a block updates before moving to its next chunk
constexpr int kMaxBlocks = 1024;    // blocks stride over the chunks beyond this
constexpr size_t kArgBytes = 3840;  // batch + functor stay under the classic 4 KiB of kernel arguments

struct NoScalars {};

template <class T, int D, class S>
struct Batch {
  static constexpr int kMax = int((kArgBytes - 64) / (D * sizeof(T*) + 2 * sizeof(int64_t) + sizeof(S)));
  T* ptr[D][kMax];          // operand k of tensor j (null: an optional operand not used)
  int64_t numel[kMax];      // elements of tensor j
  int64_t chunk_end[kMax];  // chunks of tensors 0..j
  S scalars[kMax];
  int n;  // tensors in this batch
};

template <class T, int D, class S, class F>
__global__ void __launch_bounds__(kThreads) multi_tensor_kernel(const __grid_constant__ Batch<T, D, S> b, F f) {
  const int64_t chunks = b.chunk_end[b.n - 1];
  int j = 0;  // a block visits its chunks in increasing order, so j only moves forward
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    while (c >= b.chunk_end[j]) ++j;
    const int64_t first = (c - (j > 0 ? b.chunk_end[j - 1] : 0)) * kChunk;
    const int64_t end = first + kChunk < b.numel[j] ? first + kChunk : b.numel[j];
    for (int64_t i = first + threadIdx.x; i < end; i += blockDim.x) f(b, j, i);
  }
}

struct SGDElement {
  template <class T>
  __device__ __forceinline__ void operator()(const Batch<T, 3, rules::SGDScalars>& b, int j, int64_t i) const {
    using A = opmath_t<T>;
    T *p = b.ptr[0][j], *buf = b.ptr[2][j];
    A x = dload(p[i]), m = buf ? A(dload(buf[i])) : A(0);
    rules::sgd<A>(x, dload(b.ptr[1][j][i]), m, b.scalars[j]);
    p[i] = dstore<T>(x);
    if (buf) buf[i] = dstore<T>(m);
  }
};

struct AdamElement {
  template <class T>
  __device__ __forceinline__ void operator()(const Batch<T, 5, rules::AdamScalars>& b, int j, int64_t i) const {
    using A = opmath_t<T>;
    T *p = b.ptr[0][j], *m = b.ptr[2][j], *v = b.ptr[3][j], *vmax = b.ptr[4][j];
    A x = dload(p[i]), mi = dload(m[i]), vi = dload(v[i]), wi = vmax ? A(dload(vmax[i])) : A(0);
    rules::adam<A>(x, dload(b.ptr[1][j][i]), mi, vi, wi, b.scalars[j]);
    p[i] = dstore<T>(x), m[i] = dstore<T>(mi), v[i] = dstore<T>(vi);
    if (vmax) vmax[i] = dstore<T>(wi);
  }
};

struct LionElement {
  template <class T>
  __device__ __forceinline__ void operator()(const Batch<T, 3, rules::LionScalars>& b, int j, int64_t i) const {
    using A = opmath_t<T>;
    T *p = b.ptr[0][j], *m = b.ptr[2][j];
    A x = dload(p[i]), mi = dload(m[i]);
    rules::lion<A>(x, dload(b.ptr[1][j][i]), mi, rules::LionCoeffs<A>(b.scalars[j]));
    p[i] = dstore<T>(x), m[i] = dstore<T>(mi);
  }
};

// The steps of float32 parameters (and state) from half gradients G (apex's FusedAdam's mixed dtypes:
// no float32 copy of the gradients), read with the scalars' factors: the gradient widened, then
// multiplied by each factor with __fmul_rn (never fused into an FMA), as the float32 copy's mul_
// kernels compute it; the rule then runs on it exactly as on a float32 gradient loaded from memory.
// The gradient's pointer travels as float* and is read as G.
__device__ __forceinline__ float scaled_grad(float g, const rules::GradFactors& f) {
  return __fmul_rn(__fmul_rn(g, f.first), f.second);
}

template <class G>
struct SGDMixedElement {
  __device__ __forceinline__ void operator()(const Batch<float, 3, rules::SGDScalars>& b, int j, int64_t i) const {
    float *p = b.ptr[0][j], *buf = b.ptr[2][j];
    const G* g = reinterpret_cast<const G*>(b.ptr[1][j]);
    const rules::SGDScalars& s = b.scalars[j];
    float x = p[i], m = buf ? buf[i] : 0.0f;
    rules::sgd<float>(x, scaled_grad(float(dload(g[i])), s.grad), m, s);
    p[i] = x;
    if (buf) buf[i] = m;
  }
};

template <class G>
struct AdamMixedElement {
  __device__ __forceinline__ void operator()(const Batch<float, 5, rules::AdamScalars>& b, int j, int64_t i) const {
    float *p = b.ptr[0][j], *m = b.ptr[2][j], *v = b.ptr[3][j], *vmax = b.ptr[4][j];
    const G* g = reinterpret_cast<const G*>(b.ptr[1][j]);
    const rules::AdamScalars& s = b.scalars[j];
    float x = p[i], mi = m[i], vi = v[i], wi = vmax ? vmax[i] : 0.0f;
    rules::adam<float>(x, scaled_grad(float(dload(g[i])), s.grad), mi, vi, wi, s);
    p[i] = x, m[i] = mi, v[i] = vi;
    if (vmax) vmax[i] = wi;
  }
};

struct UnscaleElement {
  float* found_inf;
  double inv_scale;
  bool scale;
  template <class T>
  __device__ __forceinline__ void operator()(const Batch<T, 1, NoScalars>& b, int j, int64_t i) const {
    using A = opmath_t<T>;
    T* p = b.ptr[0][j];
    A v = dload(p[i]);
    if (!isfinite(v)) *found_inf = 1.0f;  // every writer writes the same value
    if (scale) p[i] = dstore<T>(v * A(inv_scale));
  }
};

}  // namespace mg::cuda::multi_tensor_kernels
