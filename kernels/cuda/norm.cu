// Layer norm over the rows of a contiguous [rows, n] view: a block per row, or a warp per row
// (variant "warp"), with shuffle reductions; the backward's weight and bias sums run by columns.
// RMS norm runs the same kernels without centering (kCenter false: the mean taken as 0, no bias).
// Batch norm per channel of a contiguous [N, C, S] view: a block per channel. The kernels are
// layer_norm.cuh's and batch_norm.cuh's.
#include <memgrad/core/variants_impl.h>
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/batch_norm.cuh>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/layer_norm.cuh>

namespace mg::cuda {

namespace {

using namespace layer_norm_kernels;
using namespace batch_norm_kernels;

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
