// Layer norm over the rows of a contiguous [rows, n] view: a block per row, or a warp per row
// (variant "warp"), with shuffle reductions; the backward's weight and bias sums run by columns.
// RMS norm runs the same kernels without centering (kCenter false: the mean taken as 0, no bias).
// Batch norm per channel of a contiguous [N, C, S] view: a block per channel.
#include <memgrad/core/variants_impl.h>
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/layer_norm.cuh>

namespace mg::cuda {

namespace {

using namespace layer_norm_kernels;

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
  __shared__ A shared[32];
  const int64_t M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    A mu = mean[c], v = var[c];
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
  __shared__ Pair<A> shared[32];
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

enum class LayerNorm { Block, Warp };
const KernelVariant<LayerNorm> kLayerNorm(DeviceType::CUDA, "layer_norm",
                                          {{LayerNorm::Block, "block"}, {LayerNorm::Warp, "warp"}});

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Out& out, const Out& mean,
                const Out& rstd, double eps) {
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / std::max<int64_t>(n, 1);
  if (rows == 0) return;
  cudaStream_t s = stream_for(out);
  const bool warp_row = kLayerNorm == LayerNorm::Warp;
  dispatch_floating(x.dtype(), "layer_norm", [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T *w = dptr_or_null<T>(weight), *b = dptr_or_null<T>(bias);
    if (warp_row)
      layer_norm_kernel<true><<<grid_for(rows, 8), 256, 0, s>>>(dptr<T>(x), w, b, dptr<T>(out), dptr<opmath_t<T>>(mean),
                                                                dptr<opmath_t<T>>(rstd), rows, n, eps);
    else
      layer_norm_kernel<false><<<grid_for(rows, 1), kThreads, 0, s>>>(
          dptr<T>(x), w, b, dptr<T>(out), dptr<opmath_t<T>>(mean), dptr<opmath_t<T>>(rstd), rows, n, eps);
  });
  check_launch("layer_norm");
}

void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Out& grad_x, const Out& grad_weight, const Out& grad_bias) {
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / std::max<int64_t>(n, 1);
  cudaStream_t s = stream_for(x);
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T *g = dptr<T>(grad), *xp = dptr<T>(x);
    const opmath_t<T>*mp = dptr<opmath_t<T>>(mean), *rp = dptr<opmath_t<T>>(rstd);
    if (grad_x.defined() && rows > 0)
      layer_norm_grad_x_kernel<<<grid_for(rows, 1), kThreads, 0, s>>>(g, xp, mp, rp, dptr_or_null<T>(weight),
                                                                      dptr<T>(grad_x), rows, n);
    if ((grad_weight.defined() || grad_bias.defined()) && n > 0) {
      T *gw = dptr_or_null<T>(grad_weight), *gb = dptr_or_null<T>(grad_bias);
      const int64_t slices = layer_norm_wb_slices(rows, n);
      const Tensor part = layer_norm_backward_scratch(grad, x, mean, rstd, weight, grad_x, grad_weight, grad_bias)[0];
      const dim3 grid(unsigned(grid_for((n + 31) / 32, 1)), unsigned(slices));
      layer_norm_grad_wb_kernel<<<grid, dim3(32, 8), 0, s>>>(g, xp, mp, rp, gw, gb, dptr_or_null<opmath_t<T>>(part),
                                                             rows, n);
      if (part.defined())
        layer_norm_wb_sum_kernel<<<grid_for(n), kThreads, 0, s>>>(dptr<opmath_t<T>>(part), gw, gb, slices, n);
    }
  });
  check_launch("layer_norm_backward");
}

void batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Out& out, const Out& mean,
                const Out& var, const Out& rstd, bool training, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  if (C == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch_floating(x.dtype(), "batch_norm", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using St = BnStat<T>;
    batch_norm_kernel<<<grid_for(C, 1), kThreads, 0, s>>>(dptr<T>(x), dptr_or_null<T>(weight), dptr_or_null<T>(bias),
                                                          dptr<T>(out), dptr<St>(mean), dptr<St>(var), dptr<St>(rstd),
                                                          N, C, S, training, eps);
  });
  check_launch("batch_norm");
}

void batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Out& grad_x, const Out& grad_weight, const Out& grad_bias,
                         bool training) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  if (C == 0) return;
  cudaStream_t s = stream_for(x);
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using St = BnStat<T>;
    batch_norm_backward_kernel<<<grid_for(C, 1), kThreads, 0, s>>>(
        dptr<T>(grad), dptr<T>(x), dptr<St>(mean), dptr<St>(rstd), dptr_or_null<T>(weight), dptr_or_null<T>(grad_x),
        dptr_or_null<T>(grad_weight), dptr_or_null<T>(grad_bias), N, C, S, training);
  });
  check_launch("batch_norm_backward");
}

// The sum, then layer_norm on it: two launches of the existing kernels (no fused CUDA kernel yet),
// the same bytes as the fused CPU kernel.
void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, const Out& sum,
                    const Out& out, const Out& mean, const Out& rstd, double eps) {
  binary(BinaryOp::Add, x, residual, sum, 1.0);
  layer_norm(sum, weight, bias, out, mean, rstd, eps);
}

// RMS norm: layer norm's kernels without centering, a block per row.
void rms_norm(const Tensor& x, const Tensor& weight, const Out& out, const Out& rstd, double eps) {
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / std::max<int64_t>(n, 1);
  if (rows == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch_floating(x.dtype(), "rms_norm", [&](auto xt) {
    using T = typename decltype(xt)::type;
    layer_norm_kernel<false, T, false><<<grid_for(rows, 1), kThreads, 0, s>>>(
        dptr<T>(x), dptr_or_null<T>(weight), nullptr, dptr<T>(out), nullptr, dptr<opmath_t<T>>(rstd), rows, n, eps);
  });
  check_launch("rms_norm");
}

void rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& rstd, const Tensor& weight, const Out& grad_x,
                       const Out& grad_weight) {
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / std::max<int64_t>(n, 1);
  cudaStream_t s = stream_for(x);
  dispatch_floating(x.dtype(), "rms_norm_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = opmath_t<T>;
    const T *g = dptr<T>(grad), *xp = dptr<T>(x);
    const A* rp = dptr<A>(rstd);
    if (grad_x.defined() && rows > 0)
      layer_norm_grad_x_kernel<T, false><<<grid_for(rows, 1), kThreads, 0, s>>>(
          g, xp, nullptr, rp, dptr_or_null<T>(weight), dptr<T>(grad_x), rows, n);
    if (grad_weight.defined() && n > 0) {
      T* gw = dptr<T>(grad_weight);
      const int64_t slices = layer_norm_wb_slices(rows, n);
      const Tensor part = rms_norm_backward_scratch(grad, x, rstd, weight, grad_x, grad_weight)[0];
      const dim3 grid(unsigned(grid_for((n + 31) / 32, 1)), unsigned(slices));
      layer_norm_grad_wb_kernel<T, false>
          <<<grid, dim3(32, 8), 0, s>>>(g, xp, nullptr, rp, gw, nullptr, dptr_or_null<A>(part), rows, n);
      if (part.defined())
        layer_norm_wb_sum_kernel<T, false><<<grid_for(n), kThreads, 0, s>>>(dptr<A>(part), gw, nullptr, slices, n);
    }
  });
  check_launch("rms_norm_backward");
}

}  // namespace mg::cuda
