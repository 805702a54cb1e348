// The layer norm kernels (kernels/cuda/layer_norm.cuh), which rms_norm runs without centering, on the
// host by emulated_device.h against the library's CPU ops, forward and backward: rows below a warp,
// odd widths, grids smaller than the rows (their stride loops), a tall input whose weight sums go
// through row slices and the in-order pass that adds them, and layer norm's warp-per-row variant.
// Both sides sum in their own order: float32 within 2e-5 of the largest value, float64 within 1e-12,
// float16 and bfloat16 (statistics in float) within two units of their last place.
#include <doctest/doctest.h>

#include "emulated_device.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/cuda_kernels.h>  // layer_norm_wb_slices
#include <memgrad/kernels/cuda/layer_norm.cuh>

#include <cmath>
#include <vector>

#include "emulated_harness.h"

namespace {
using namespace mg;
using namespace mg::cuda::layer_norm_kernels;

enum class Norm { Rms, LayerBlock, LayerWarp };
constexpr unsigned kThreads = 128;  // norm.cu launches 256: the kernels read blockDim, fewer fibers run faster

// The largest difference over the largest magnitude of `want`.
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
  for (double w : want) scale = std::max(scale, std::fabs(w));
  return err / scale;
}

template <class T, Norm kNorm>
void check(int64_t rows, int64_t n, unsigned grid) {
  using A = opmath_t<T>;
  constexpr bool kCenter = kNorm != Norm::Rms, kWarp = kNorm == Norm::LayerWarp;
  const DType dt = dtype_of<T>::value, at = dt == kFloat64 ? kFloat64 : kFloat32;
  CAPTURE(rows);
  CAPTURE(n);
  CAPTURE(int(kNorm));
  CAPTURE(dt);
  manual_seed(uint64_t(rows * 1000 + n));
  const double eps = 1e-5;
  Tensor x = (randn({rows, n}) * 2.0 + 0.5).to(dt).requires_grad_(), w = (randn({n}) + 1.0).to(dt).requires_grad_();
  Tensor b = kCenter ? randn({n}).to(dt).requires_grad_() : Tensor(), up = randn({rows, n}).to(dt);
  Tensor y = kCenter ? layer_norm(x, {n}, w, b, eps) : rms_norm(x, {n}, w, eps);
  y.backward(up);

  const Tensor ys = empty({rows, n}, dt), gx = empty({rows, n}, dt), gw = empty({n}, dt), gb = empty({n}, dt);
  const Tensor mean = empty({rows}, at), rstd = empty({rows}, at);
  const emu::DeviceTensor dx("x", x.detach()), dw("weight", w.detach()), db("bias", kCenter ? b.detach() : Tensor());
  const emu::DeviceTensor dup("grad", up), dy = emu::DeviceTensor::output("out", ys);
  const emu::DeviceTensor dgx = emu::DeviceTensor::output("grad_x", gx),
                          dgw = emu::DeviceTensor::output("grad_weight", gw);
  const emu::DeviceTensor dgb = emu::DeviceTensor::output("grad_bias", gb);
  const emu::DeviceTensor dmean = emu::DeviceTensor::output("mean", mean),
                          drstd = emu::DeviceTensor::output("rstd", rstd);
  const T *xp = dx.ptr<T>(), *wp = dw.ptr<T>(), *gp = dup.ptr<T>();
  A* const mp = kCenter ? dmean.ptr<A>() : nullptr;
  const dim3 block(kThreads);
  emu::launch<layer_norm_kernel<kWarp, T, kCenter>>({dim3(grid), block}, xp, wp, db.ptr<T>(), dy.ptr<T>(), mp,
                                                    drstd.ptr<A>(), rows, n, eps);
  emu::launch<layer_norm_grad_x_kernel<T, kCenter>>({dim3(grid), block}, gp, xp, mp, drstd.ptr<A>(), wp, dgx.ptr<T>(),
                                                    rows, n);
  const int64_t slices = cuda::layer_norm_wb_slices(rows, n), sums = kCenter ? 2 : 1;
  emu::Buffer<A> part("part", slices > 1 ? size_t(slices * sums * n) : 0);
  const unsigned col_blocks = unsigned(std::min<int64_t>((n + 31) / 32, 3));  // fewer than the columns' 32-wide tiles
  T* const gbp = kCenter ? dgb.ptr<T>() : nullptr;
  emu::launch<layer_norm_grad_wb_kernel<T, kCenter>>({dim3(col_blocks, unsigned(slices), 1), dim3(32, 8, 1)}, gp, xp,
                                                     mp, drstd.ptr<A>(), dgw.ptr<T>(), gbp,
                                                     slices > 1 ? part.data() : nullptr, rows, n);
  if (slices > 1)
    emu::launch<layer_norm_wb_sum_kernel<T, kCenter>>({dim3(2), dim3(64)}, part.data(), dgw.ptr<T>(), gbp, slices, n);
  for (const emu::DeviceTensor* d : {&dy, &dgx, &dgw, &dgb, &dmean, &drstd}) d->download();

  const double tol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 2e-5 : emu::rtol_for(dt, 2);
  CHECK(relative_error(ys.to_vector<double>(), y.detach().to_vector<double>()) < tol);
  std::vector<double> want_rstd(static_cast<size_t>(rows));  // 1 / sqrt(mean((x - mean)^2) + eps), in float64
  const std::vector<double> xv = x.detach().to_vector<double>();
  for (int64_t i = 0; i < rows; ++i) {
    double mu = 0, ss = 0;
    for (int64_t j = 0; kCenter && j < n; ++j) mu += xv[size_t(i * n + j)] / double(n);
    for (int64_t j = 0; j < n; ++j) ss += std::pow(xv[size_t(i * n + j)] - mu, 2) / double(n);
    want_rstd[size_t(i)] = 1 / std::sqrt(ss + eps);
  }
  CHECK(relative_error(rstd.to_vector<double>(), want_rstd) < (dt == kFloat64 ? tol : 2e-5));  // float statistics
  CHECK(relative_error(gx.to_vector<double>(), x.grad().to_vector<double>()) < tol);
  CHECK(relative_error(gw.to_vector<double>(), w.grad().to_vector<double>()) < tol);
  if (kCenter) CHECK(relative_error(gb.to_vector<double>(), b.grad().to_vector<double>()) < tol);
}

template <Norm kNorm>
void check_all() {
  check<float, kNorm>(7, 3, 3);      // rows narrower than a warp (one column is ill-conditioned: 1 - xhat^2)
  check<float, kNorm>(37, 33, 5);    // rows over a grid of 5, a width past a warp
  check<float, kNorm>(3, 768, 2);    // GPT-2's width
  check<double, kNorm>(5, 1025, 4);  // past a block of 256
  check<float, kNorm>(520, 64, 16);  // tall: the weight sums in 2 slices of 260 rows, then added in order
  check<double, kNorm>(768, 40, 8);  // 3 slices
  check<Half, kNorm>(37, 33, 5);     // 16-bit storage, float statistics
  check<BFloat16, kNorm>(520, 64, 16);
}

}  // namespace

TEST_CASE("rms_norm's cuda kernels emulated on the host match the cpu op, forward and backward") {
  check_all<Norm::Rms>();
}

TEST_CASE("layer_norm's cuda kernels (block and warp per row) emulated on the host match the cpu op") {
  check_all<Norm::LayerBlock>();
  check_all<Norm::LayerWarp>();
}
