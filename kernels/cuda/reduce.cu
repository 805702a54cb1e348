// Reductions, arg reductions and scans on a contiguous [outer, r, inner] view, along r; the kernels
// are reduce.cuh's.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/reduce.cuh>

namespace mg::cuda {

using namespace reduce_kernels;

void reduce(ReduceOp op, const Tensor& x, const Out& out, int64_t outer, int64_t r, int64_t inner) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  if (op == ReduceOp::LogSumExp) {
    dispatch_floating(x.dtype(), "logsumexp", [&](auto xt) {
      using T = typename decltype(xt)::type;
      if (inner == 1)
        logsumexp_rows_kernel<<<grid_for(outer, 1), kThreads, 0, s>>>(dptr<T>(x), dptr<T>(out), outer, r);
      else
        logsumexp_cols_kernel<<<grid_for(outer * inner), kThreads, 0, s>>>(dptr<T>(x), dptr<T>(out), outer, r, inner);
    });
    check_launch("logsumexp");
    return;
  }
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    dispatch(out.dtype(), [&](auto ot) {
      using O = typename decltype(ot)::type;
      if (inner == 1)
        reduce_rows_kernel<<<grid_for(outer, 1), kThreads, 0, s>>>(dptr<T>(x), dptr<O>(out), outer, r, op);
      else
        reduce_cols_kernel<<<grid_for(outer * ((inner + 31) / 32), 1), dim3(32, 8), 0, s>>>(dptr<T>(x), dptr<O>(out),
                                                                                            outer, r, inner, op);
    });
  });
  check_launch("reduce");
}

void scan(ScanOp op, const Tensor& x, const Out& out, int64_t outer, int64_t r, int64_t inner) {
  if (out.numel() == 0) return;
  cudaStream_t s = stream_for(out);
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    dispatch(out.dtype(), [&](auto ot) {
      using O = typename decltype(ot)::type;
      scan_kernel<<<grid_for(outer * inner), kThreads, 0, s>>>(dptr<T>(x), dptr<O>(out), outer, r, inner,
                                                               op == ScanOp::Sum);
    });
  });
  check_launch("scan");
}

void cumprod_backward(const Tensor& grad, const Tensor& x, const Tensor& out, const Out& grad_in, int64_t outer,
                      int64_t r, int64_t inner) {
  if (grad_in.numel() == 0) return;
  cudaStream_t s = stream_for(grad_in);
  dispatch_floating(x.dtype(), "cumprod_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    cumprod_backward_kernel<<<grid_for(outer * inner), kThreads, 0, s>>>(dptr<T>(grad), dptr<T>(x), dptr<T>(out),
                                                                         dptr<T>(grad_in), outer, r, inner);
  });
  check_launch("cumprod_backward");
}

void arg_reduce(ReduceOp op, const Tensor& x, const Out& values, const Out& indices, int64_t outer, int64_t r,
                int64_t inner) {
  if (indices.numel() == 0) return;
  cudaStream_t s = stream_for(indices);
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    int blocks = inner == 1 ? grid_for(outer, 1) : grid_for(outer * inner);
    arg_reduce_kernel<<<blocks, kThreads, 0, s>>>(dptr<T>(x), dptr_or_null<T>(values), dptr<int64_t>(indices), outer, r,
                                                  inner, op == ReduceOp::Max);
  });
  check_launch("arg_reduce");
}

}  // namespace mg::cuda
