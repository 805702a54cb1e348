// The convolution lowering and pooling kernels (kernels/cuda/conv.cuh), the integer matrix product
// (matmul.cuh) and batch norm (batch_norm.cuh), emulated on the host against the CPU backend's:
// im2col and col2im with strides, padding and dilation; max pooling with its argmax and the
// backward's atomic scatter (overlapping windows), average pooling both ways; integer and bool
// products with transposed and broadcast operands (cuBLAS takes the floating ones, which the CPU's
// GEMM stands for in tests); batch norm in training and evaluation, with and without weights.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/batch_norm.cuh>
#include <memgrad/kernels/cuda/conv.cuh>
#include <memgrad/kernels/cuda/matmul.cuh>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda::conv_kernels;
using emu::cpu;

const emu::Config kGrid{dim3(3), dim3(64)};

Conv2dGeometry geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p, int64_t d) {
  Conv2dGeometry g{n, c, h, w, k, k, 0, 0, s, s, p, p, d, d};
  g.oh = (h + 2 * p - d * (k - 1) - 1) / s + 1;
  g.ow = (w + 2 * p - d * (k - 1) - 1) / s + 1;
  return g;
}

const Conv2dGeometry kGeometries[] = {geometry(2, 3, 7, 9, 3, 1, 1, 1), geometry(1, 2, 11, 10, 3, 2, 1, 2),
                                      geometry(2, 1, 5, 5, 1, 1, 0, 1), geometry(1, 4, 9, 9, 2, 2, 1, 1)};

}  // namespace

TEST_CASE("im2col_kernel and col2im_kernel") {
  for (const Conv2dGeometry& g : kGeometries)
    for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32}) {
      const Shape xs{g.n, g.c, g.h, g.w}, cs{g.n, g.c * g.kh * g.kw, g.oh * g.ow};
      const Tensor x = is_floating(t) ? emu::uniform(xs, t, -1, 1, 1) : emu::ints(xs, t, -9, 9, 1);
      const Tensor col = empty(cs, t), got = empty(cs, t);
      cpu(&Backend::im2col, x, Out(col), g);
      const Tensor back = zeros(xs, t), got_back = zeros(xs, t);
      cpu(&Backend::col2im, col, Out(back), g);
      dispatch(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const emu::DeviceTensor dx("x", x), dcol = emu::DeviceTensor::output("col", got), dcol_in("col", col);
        emu::launch<im2col_kernel<T>>(kGrid, dx.ptr<T>(), dcol.ptr<T>(), g);
        dcol.download();
        const emu::DeviceTensor dback("x", got_back);
        emu::launch<col2im_kernel<T>>(kGrid, dcol_in.ptr<T>(), dback.ptr<T>(), g);
        dback.download();
      });
      emu::check_equal(got, col, "im2col, " + emu::name_of(t));
      const double tol = is_floating(t) ? emu::rtol_for(t, 2) : 0;
      emu::check_close(got_back, back, tol, tol, "col2im, " + emu::name_of(t));
    }
}

TEST_CASE("conv2d lowered as on cuda without cuDNN: im2col emulated, the CPU's GEMM in cuBLAS's place") {
  for (const Conv2dGeometry& g : kGeometries)
    for (DType t : {kFloat32, kBFloat16}) {
      const int64_t O = 5, K = g.c * g.kh * g.kw;
      const Tensor x = emu::uniform({g.n, g.c, g.h, g.w}, t, -1, 1, 2),
                   w = emu::uniform({O, g.c, g.kh, g.kw}, t, -1, 1, 3);
      const Tensor want = conv2d(x, w, Tensor(), {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw});
      const Tensor col = empty({g.n, K, g.oh * g.ow}, t);
      dispatch_floating(t, "test", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const emu::DeviceTensor dx("x", x), dcol = emu::DeviceTensor::output("col", col);
        emu::launch<im2col_kernel<T>>(kGrid, dx.ptr<T>(), dcol.ptr<T>(), g);
        dcol.download();
      });
      const Tensor got = matmul(w.view({O, K}), col).view({g.n, O, g.oh, g.ow});  // cuBLAS's product on the gpu
      emu::check_close(got, want, emu::rtol_for(t, 8), emu::rtol_for(t, 8), "conv2d, " + emu::name_of(t));
    }
}

TEST_CASE("max_pool_kernel on integers") {
  for (const Conv2dGeometry& g : kGeometries) {
    if (g.ph * 2 > g.kh) continue;
    const Shape xs{g.n, g.c, g.h, g.w}, os{g.n, g.c, g.oh, g.ow};
    const Tensor x = emu::ints(xs, kInt64, -5, 5, 6);  // ties: the earliest tap
    const Tensor out = empty(os, kInt64), idx = empty(os, kInt64), got = empty(os, kInt64), got_idx = empty(os, kInt64);
    cpu(&Backend::max_pool2d, x, Out(out), Out(idx), g);
    const emu::DeviceTensor dx("x", x), dout = emu::DeviceTensor::output("out", got);
    const emu::DeviceTensor didx = emu::DeviceTensor::output("indices", got_idx);
    emu::launch<max_pool_kernel<int64_t>>(kGrid, dx.ptr<int64_t>(), dout.ptr<int64_t>(), didx.ptr<int64_t>(), g);
    dout.download();
    didx.download();
    emu::check_equal(got, out, "max_pool2d, int64");
    emu::check_equal(got_idx, idx, "max_pool2d indices, int64");
  }
}

TEST_CASE("max_pool_kernel, max_pool_backward_kernel and avg_pool_kernel, forward and backward") {
  for (const Conv2dGeometry& g : kGeometries)
    for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      if (g.ph * 2 > g.kh) continue;  // pooling takes padding up to half the window
      const Shape xs{g.n, g.c, g.h, g.w}, os{g.n, g.c, g.oh, g.ow};
      const Tensor x = emu::with_edges(xs, t, -3, 3, 2), grad = emu::uniform(os, t, -1, 1, 3);
      const Tensor out = empty(os, t), idx = empty(os, kInt64), got = empty(os, t), got_idx = empty(os, kInt64);
      const Tensor gx = zeros(xs, t), got_gx = zeros(xs, t);
      cpu(&Backend::max_pool2d, x, Out(out), Out(idx), g);
      cpu(&Backend::max_pool2d_backward, grad, idx, Out(gx));
      const Tensor avg = empty(os, t), got_avg = empty(os, t), agx = zeros(xs, t), got_agx = zeros(xs, t);
      const Tensor finite = emu::uniform(xs, t, -3, 3, 4);
      cpu(&Backend::avg_pool2d, finite, Out(avg), g);
      cpu(&Backend::avg_pool2d_backward, grad, Out(agx), g);
      dispatch_floating(t, "test", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const emu::DeviceTensor dx("x", x), dout = emu::DeviceTensor::output("out", got);
        const emu::DeviceTensor didx = emu::DeviceTensor::output("indices", got_idx);
        emu::launch<max_pool_kernel<T>>(kGrid, dx.ptr<T>(), dout.ptr<T>(), didx.ptr<int64_t>(), g);
        dout.download();
        didx.download();
        const emu::DeviceTensor dgrad("grad", grad), dindices("indices", idx), dgx("grad_x", got_gx);
        emu::launch<max_pool_backward_kernel<T>>(kGrid, dgrad.ptr<T>(), dindices.ptr<int64_t>(), dgx.ptr<T>(),
                                                 g.oh * g.ow, g.h * g.w, grad.numel());
        dgx.download();
        const emu::DeviceTensor df("x", finite), davg = emu::DeviceTensor::output("out", got_avg);
        emu::launch<avg_pool_kernel<T, false>>(kGrid, df.ptr<T>(), davg.ptr<T>(), g);
        davg.download();
        const emu::DeviceTensor dagx("grad_x", got_agx);
        emu::launch<avg_pool_kernel<T, true>>(kGrid, dgrad.ptr<T>(), dagx.ptr<T>(), g);
        dagx.download();
      });
      const double tol = emu::rtol_for(t, 4);
      emu::check_equal(got, out, "max_pool2d, " + emu::name_of(t));
      emu::check_equal(got_idx, idx, "max_pool2d indices, " + emu::name_of(t));
      emu::check_close(got_gx, gx, tol, tol, "max_pool2d_backward, " + emu::name_of(t));
      emu::check_close(got_avg, avg, tol, tol, "avg_pool2d, " + emu::name_of(t));
      emu::check_close(got_agx, agx, tol, tol, "avg_pool2d_backward, " + emu::name_of(t));
    }
}

TEST_CASE("int_gemm_kernel: integer and bool products, transposed and broadcast operands") {
  using mg::cuda::matmul_kernels::int_gemm_kernel;
  for (DType t : {kInt32, kInt64, kUInt8, kInt8, kBool})
    for (bool transposed : {false, true}) {
      const int64_t B = 3, M = 5, K = 33, N = 7;
      const Tensor a = emu::ints({B, M, K}, t, 0, t == kBool ? 2 : 4, 1);
      // b: [B, K, N] contiguous, or a transposed [B, N, K], broadcast over the batch
      const Tensor b = transposed ? emu::ints({1, N, K}, t, 0, t == kBool ? 2 : 4, 2).transpose(1, 2).expand({B, K, N})
                                  : emu::ints({B, K, N}, t, 0, t == kBool ? 2 : 4, 2);
      const Tensor want = empty({B, M, N}, t), got = empty({B, M, N}, t);
      cpu(&Backend::matmul, a, b, Out(want));
      dispatch(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_integral_v<T>) {
          const emu::DeviceTensor da("a", a), db("b", b), dout = emu::DeviceTensor::output("out", got);
          emu::launch<int_gemm_kernel<T>>(kGrid, da.ptr<T>(), db.ptr<T>(), dout.ptr<T>(), B, M, K, N, a.stride(0),
                                          a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2));
          dout.download();
        }
      });
      emu::check_equal(got, want, "matmul, " + emu::name_of(t));
    }
}

TEST_CASE("batch_norm_kernel and batch_norm_backward_kernel, training and evaluation") {
  using namespace mg::cuda::batch_norm_kernels;
  for (DType t : emu::floating_dtypes())
    for (bool training : {true, false})
      for (bool affine : {true, false})
        for (Shape s : {Shape{4, 3, 33}, Shape{2, 5, 1}, Shape{1, 2, 1025}, Shape{0, 3, 4}}) {
          CAPTURE(training);
          CAPTURE(affine);
          const int64_t N = s[0], C = s[1], S = s[2];
          const DType st = t == kFloat64 ? kFloat64 : kFloat32;
          const Tensor x = emu::uniform(s, t, -2, 3, 1), g = emu::uniform(s, t, -1, 1, 2);
          const Tensor w = affine ? emu::uniform({C}, t, 0.5, 2, 3) : Tensor(),
                       b = affine ? emu::uniform({C}, t, -1, 1, 4) : Tensor();
          const Tensor mean = emu::uniform({C}, st, -1, 1, 5), var = emu::uniform({C}, st, 0.5, 2, 6),
                       rstd = empty({C}, st);
          const Tensor got_mean = mean.clone(), got_var = var.clone(), got_rstd = empty({C}, st);
          const Tensor y = empty(s, t), got_y = empty(s, t), gx = empty(s, t), got_gx = empty(s, t);
          const Tensor gw = affine ? empty({C}, t) : Tensor(), gb = affine ? empty({C}, t) : Tensor();
          const Tensor got_gw = affine ? empty({C}, t) : Tensor(), got_gb = affine ? empty({C}, t) : Tensor();
          cpu(&Backend::batch_norm, x, w, b, Out(y), Out(mean), Out(var), Out(rstd), training, 1e-5);
          cpu(&Backend::batch_norm_backward, g, x, mean, rstd, w, Out(gx), Out(gw), Out(gb), training);
          dispatch_floating(t, "test", [&](auto tag) {
            using T = typename decltype(tag)::type;
            using A = BnStat<T>;
            // training writes mean and var (outputs, no values yet); evaluation reads them
            const emu::DeviceTensor dx("x", x), dw("weight", w), db("bias", b);
            const emu::DeviceTensor dmean =
                training ? emu::DeviceTensor::output("mean", got_mean) : emu::DeviceTensor("mean", got_mean);
            const emu::DeviceTensor dvar =
                training ? emu::DeviceTensor::output("var", got_var) : emu::DeviceTensor("var", got_var);
            const emu::DeviceTensor drstd = emu::DeviceTensor::output("rstd", got_rstd),
                                    dy = emu::DeviceTensor::output("out", got_y);
            const emu::Config c{dim3(2), dim3(128)};
            emu::launch<batch_norm_kernel<T>>(c, dx.ptr<T>(), dw.ptr<T>(), db.ptr<T>(), dy.ptr<T>(), dmean.ptr<A>(),
                                              dvar.ptr<A>(), drstd.ptr<A>(), N, C, S, training, 1e-5);
            const emu::DeviceTensor dg("grad", g), dgx = emu::DeviceTensor::output("grad_x", got_gx);
            const emu::DeviceTensor dgw = emu::DeviceTensor::output("grad_weight", got_gw);
            const emu::DeviceTensor dgb = emu::DeviceTensor::output("grad_bias", got_gb);
            emu::launch<batch_norm_backward_kernel<T>>(c, dg.ptr<T>(), dx.ptr<T>(), dmean.ptr<A>(), drstd.ptr<A>(),
                                                       dw.ptr<T>(), dgx.ptr<T>(), dgw.ptr<T>(), dgb.ptr<T>(), N, C, S,
                                                       training);
            for (const emu::DeviceTensor* d : {&dmean, &dvar, &drstd, &dy, &dgx, &dgw, &dgb}) d->download();
          });
          const double tol = emu::rtol_for(t, 4 * std::sqrt(double(N * S)));
          emu::check_close(got_y, y, tol, tol, "batch_norm, " + emu::name_of(t));
          emu::check_close(got_mean, mean, tol, tol, "batch_norm mean");
          emu::check_close(got_var, var, tol, tol, "batch_norm var");
          emu::check_close(got_rstd, rstd, tol, tol, "batch_norm rstd");
          emu::check_close(got_gx, gx, tol, tol, "batch_norm_backward grad_x, " + emu::name_of(t));
          if (affine) {
            emu::check_close(got_gw, gw, tol, tol, "batch_norm_backward grad_weight");
            emu::check_close(got_gb, gb, tol, tol, "batch_norm_backward grad_bias");
          }
        }
}
