// Elementwise CUDA ops: copies and casts, fills, random fills (the CPU's counter-based generator, so
// the same seed and offset give the same numbers), unary and binary maps, dropout; their kernels and
// functors are elementwise.cuh's.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/elementwise.cuh>

namespace mg::cuda {

namespace {

using namespace elementwise_kernels;

template <class F>
void fill_indexed(const char* op, const Tensor& dst, F f) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t s = stream_for(dst);
  dispatch(dst.dtype(), [&](auto d) {
    using T = typename decltype(d)::type;
    fill_indexed_kernel<<<grid_for(n), 256, 0, s>>>(dptr<T>(dst), n, f);
  });
  check_launch(op);
}

}  // namespace

void copy(const Tensor& src, const Out& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() && src.shape() == dst.shape()) {
    if (dst.nbytes() == 0) return;
    cudaStream_t s = stream_for(dst);
    cudaError_t e = cudaMemcpyAsync(dptr<char>(dst), dptr<char>(src), dst.nbytes(), cudaMemcpyDeviceToDevice, s);
    MG_CHECK(e == cudaSuccess, DeviceError, "copy: cudaMemcpyAsync failed: ", cudaGetErrorString(e));
    return;
  }
  dispatch(dst.dtype(), [&](auto d) {
    using D = typename decltype(d)::type;
    dispatch(src.dtype(), [&](auto t) {
      using S = typename decltype(t)::type;
      map<D, S>("copy", dst, Identity{}, src);
    });
  });
}

void fill(const Out& dst, double value) {
  dispatch(dst.dtype(), [&](auto d) {
    using T = typename decltype(d)::type;
    map<T>("fill", dst, Constant<opmath_t<T>>{scalar_as<opmath_t<T>>(value)});
  });
}

void fill_range(const Out& dst, double start, double step) { fill_indexed("fill_range", dst, RangeFn{start, step}); }

void uniform(const Out& dst, uint64_t seed, uint64_t offset, double lo, double hi) {
  fill_indexed("uniform", dst, UniformFn{seed, offset, lo, hi});
}

void normal(const Out& dst, uint64_t seed, uint64_t offset, double mean, double std) {
  fill_indexed("normal", dst, NormalFn{seed, offset, mean, std});
}

void randint(const Out& dst, uint64_t seed, uint64_t offset, int64_t lo, int64_t hi) {
  fill_indexed("randint", dst, RandintFn{seed, offset, uint64_t(hi - lo), lo});
}

void unary(UnaryOp op, const Tensor& x, const Out& out, UnaryParams p) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T>("unary", out, unary_fn<T>(op, p), x);
  });
}

void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& saved, const Out& grad_in, UnaryParams p) {
  dispatch_floating(grad.dtype(), "unary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    map<T, T, T>("unary_backward", grad_in, UnaryGradFn<A>{op, p}, grad, saved);
  });
}

void binary(BinaryOp op, const Tensor& x, const Tensor& y, const Out& out, double alpha) {
  const bool compare = op >= BinaryOp::Eq;
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (compare)
      map<bool, T, T>("binary", out, compare_fn<T>(op), x, y);
    else
      map<T, T, T>("binary", out, binary_fn<T>(op, alpha), x, y);
  });
}

void bias_gelu(const Tensor& x, const Tensor& bias, const Out& out, bool tanh) {
  dispatch_floating(x.dtype(), "bias_gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T>("bias_gelu", out, BiasGelu<opmath_t<T>>{tanh}, x, bias);
  });
}

void bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias, const Out& grad_in, bool tanh) {
  dispatch_floating(x.dtype(), "bias_gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T, T>("bias_gelu_backward", grad_in, BiasGeluGrad<opmath_t<T>>{tanh}, grad, x, bias);
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Out& out) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, bool, T, T>("where", out, Select{}, cond, a, b);
  });
}

void dropout(const Tensor& x, const Out& out, double p, uint64_t seed, uint64_t offset) {
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    dropout_kernel<<<grid_for((n + 3) / 4), 256, 0, s>>>(dptr<T>(x), dptr<T>(out), n, float(p), A(1.0 / (1.0 - p)),
                                                         seed, offset);
  });
  check_launch("dropout");
}

void bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, const Out& out, double p,
                      uint64_t seed, uint64_t offset) {
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t s = stream_for(out);
  const int mode = p <= 0 ? 0 : p >= 1 ? 1 : 2;
  dispatch_floating(x.dtype(), "bias_dropout_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    bias_dropout_add_kernel<<<grid_for(n), 256, 0, s>>>(dptr<T>(x), dptr<T>(bias), dptr<T>(residual), dptr<T>(out), n,
                                                        std::max<int64_t>(bias.numel(), 1), mode, float(p),
                                                        A(1.0 / (1.0 - p)), seed, offset);
  });
  check_launch("bias_dropout_add");
}

}  // namespace mg::cuda
