// Convolution lowering (im2col / col2im) and 2-d pooling kernels on contiguous NCHW tensors (conv.cu
// launches them; tests/cuda runs them on the host): one thread per produced element; col2im gathers
// its taps (no atomics), pooling backward scatters with them.
#pragma once
#include <memgrad/kernels/pool.h>
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda::conv_kernels {

#define MG_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <class T>
__global__ void im2col_kernel(const T* x, T* col, Conv2dGeometry g) {
  const int64_t L = g.oh * g.ow, total = g.n * g.c * g.kh * g.kw * L;
  MG_GRID_LOOP(e, total) {
    int64_t ox = e % g.ow, oy = (e / g.ow) % g.oh, kj = (e / L) % g.kw, ki = (e / (L * g.kw)) % g.kh;
    int64_t p = e / (L * g.kw * g.kh);  // image plane n * C + c
    int64_t iy = oy * g.sh - g.ph + ki * g.dh, ix = ox * g.sw - g.pw + kj * g.dw;
    bool in = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
    col[e] = in ? x[(p * g.h + iy) * g.w + ix] : T{};
  }
}

template <class T>
__global__ void col2im_kernel(const T* col, T* x, Conv2dGeometry g) {
  using A = opmath_t<T>;
  const int64_t L = g.oh * g.ow, total = g.n * g.c * g.h * g.w;
  MG_GRID_LOOP(e, total) {
    int64_t ix = e % g.w, iy = (e / g.w) % g.h, p = e / (g.h * g.w);
    const T* rows = col + p * g.kh * g.kw * L;
    A acc = 0;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      int64_t ty = iy + g.ph - ki * g.dh;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        int64_t tx = ix + g.pw - kj * g.dw;
        if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
        acc += dload(rows[(ki * g.kw + kj) * L + (ty / g.sh) * g.ow + tx / g.sw]);
      }
    }
    x[e] = dstore<T>(dload(x[e]) + acc);
  }
}

template <class T>
__global__ void max_pool_kernel(const T* x, T* out, int64_t* indices, Conv2dGeometry g) {
  const int64_t total = g.n * g.c * g.oh * g.ow;
  MG_GRID_LOOP(e, total) {
    int64_t ox = e % g.ow, oy = (e / g.ow) % g.oh, p = e / (g.oh * g.ow);
    const T* img = x + p * g.h * g.w;
    int64_t bi = max_pool_argmax(g, oy, ox, [&](int64_t i) { return double(dload(img[i])); });
    out[e] = img[bi];
    indices[e] = bi;
  }
}

template <class T>
__global__ void max_pool_backward_kernel(const T* grad, const int64_t* indices, T* gx, int64_t L, int64_t plane,
                                         int64_t total) {
  MG_GRID_LOOP(e, total) atomic_add(gx + (e / L) * plane + indices[e], dload(grad[e]));
}

__device__ __forceinline__ double pool_inv_area(const Conv2dGeometry& g, int64_t oy, int64_t ox) {
  return 1.0 / double(avg_pool_area(g, oy, ox));
}

template <class T, bool kBackward>
__global__ void avg_pool_kernel(const T* in, T* out, Conv2dGeometry g) {
  const int64_t total = g.n * g.c * g.oh * g.ow;
  MG_GRID_LOOP(e, total) {
    int64_t ox = e % g.ow, oy = (e / g.ow) % g.oh, p = e / (g.oh * g.ow);
    double inv = pool_inv_area(g, oy, ox), acc = 0;
    int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
    for (int64_t iy = max(y0, int64_t(0)); iy < min(y0 + g.kh, g.h); ++iy)
      for (int64_t ix = max(x0, int64_t(0)); ix < min(x0 + g.kw, g.w); ++ix) {
        if constexpr (kBackward)  // in: grad of the outputs, out: grad of the input image
          atomic_add(out + p * g.h * g.w + iy * g.w + ix, opmath_t<T>(double(dload(in[e])) * inv));
        else
          acc += double(dload(in[p * g.h * g.w + iy * g.w + ix])) * inv;
      }
    if constexpr (!kBackward) out[e] = dstore<T>(acc);
  }
}

#undef MG_GRID_LOOP

}  // namespace mg::cuda::conv_kernels
