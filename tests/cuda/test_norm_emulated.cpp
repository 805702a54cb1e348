// The layer norm kernels (kernels/cuda/layer_norm.cuh), which rms_norm runs without centering, on the
// host by emulated_device.h against the library's CPU ops, forward and backward: rows below a warp,
// odd widths, grids smaller than the rows (their stride loops), a tall input whose weight sums go
// through row slices and the in-order pass that adds them, and layer norm's warp-per-row variant.
// Both sides sum in their own order: float32 within 2e-5 of the largest value, float64 within 1e-12.
#include <doctest/doctest.h>

#include "emulated_device.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/cuda_kernels.h>  // layer_norm_wb_slices
#include <memgrad/kernels/cuda/layer_norm.cuh>

#include <cmath>
#include <vector>

#include <memgrad/memgrad.h>

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
  const DType dt = std::is_same_v<T, double> ? kFloat64 : kFloat32;
  CAPTURE(rows);
  CAPTURE(n);
  CAPTURE(int(kNorm));
  manual_seed(uint64_t(rows * 1000 + n));
  const double eps = 1e-5;
  Tensor x = (randn({rows, n}) * 2.0 + 0.5).to(dt).requires_grad_(), w = (randn({n}) + 1.0).to(dt).requires_grad_();
  Tensor b = kCenter ? randn({n}).to(dt).requires_grad_() : Tensor(), up = randn({rows, n}).to(dt);
  Tensor y = kCenter ? layer_norm(x, {n}, w, b, eps) : rms_norm(x, {n}, w, eps);
  y.backward(up);

  const emu::Buffer<T> xs("x", x.detach().to_vector<T>()), ws("weight", w.detach().to_vector<T>());
  const emu::Buffer<T> gs("grad", up.to_vector<T>());
  const emu::Buffer<T> bs("bias", kCenter ? b.detach().to_vector<T>() : std::vector<T>());
  emu::Buffer<T> ys("out", xs.size()), gx("grad_x", xs.size()), gw("grad_weight", size_t(n)),
      gb("grad_bias", size_t(n));
  emu::Buffer<A> mean("mean", size_t(rows)), rstd("rstd", size_t(rows));
  A* const mp = kCenter ? mean.data() : nullptr;
  const dim3 block(kThreads);
  emu::launch<layer_norm_kernel<kWarp, T, kCenter>>({dim3(grid), block}, xs.data(), ws.data(),
                                                    kCenter ? bs.data() : nullptr, ys.data(), mp, rstd.data(), rows, n,
                                                    eps);
  emu::launch<layer_norm_grad_x_kernel<T, kCenter>>({dim3(grid), block}, gs.data(), xs.data(), mp, rstd.data(),
                                                    ws.data(), gx.data(), rows, n);
  const int64_t slices = cuda::layer_norm_wb_slices(rows, n), sums = kCenter ? 2 : 1;
  emu::Buffer<A> part("part", slices > 1 ? size_t(slices * sums * n) : 0);
  const unsigned col_blocks = unsigned(std::min<int64_t>((n + 31) / 32, 3));  // fewer than the columns' 32-wide tiles
  emu::launch<layer_norm_grad_wb_kernel<T, kCenter>>(
      {dim3(col_blocks, unsigned(slices), 1), dim3(32, 8, 1)}, gs.data(), xs.data(), mp, rstd.data(), gw.data(),
      kCenter ? gb.data() : nullptr, slices > 1 ? part.data() : nullptr, rows, n);
  if (slices > 1)
    emu::launch<layer_norm_wb_sum_kernel<T, kCenter>>({dim3(2), dim3(64)}, part.data(), gw.data(),
                                                      kCenter ? gb.data() : nullptr, slices, n);

  const double tol = dt == kFloat64 ? 1e-12 : 2e-5;
  auto as_double = [](const auto& buffer) {
    const auto v = buffer.to_vector();
    return std::vector<double>(v.begin(), v.end());
  };
  CHECK(relative_error(as_double(ys), y.detach().to_vector<double>()) < tol);
  std::vector<double> want_rstd(static_cast<size_t>(rows));  // 1 / sqrt(mean((x - mean)^2) + eps), in float64
  const std::vector<T> xv = xs.to_vector();
  for (int64_t i = 0; i < rows; ++i) {
    double mu = 0, ss = 0;
    for (int64_t j = 0; kCenter && j < n; ++j) mu += double(xv[size_t(i * n + j)]) / double(n);
    for (int64_t j = 0; j < n; ++j) ss += std::pow(double(xv[size_t(i * n + j)]) - mu, 2) / double(n);
    want_rstd[size_t(i)] = 1 / std::sqrt(ss + eps);
  }
  CHECK(relative_error(as_double(rstd), want_rstd) < tol);
  CHECK(relative_error(as_double(gx), x.grad().to_vector<double>()) < tol);
  CHECK(relative_error(as_double(gw), w.grad().to_vector<double>()) < tol);
  if (kCenter) CHECK(relative_error(as_double(gb), b.grad().to_vector<double>()) < tol);
}

template <Norm kNorm>
void check_all() {
  check<float, kNorm>(7, 3, 3);      // rows narrower than a warp (one column is ill-conditioned: 1 - xhat^2)
  check<float, kNorm>(37, 33, 5);    // rows over a grid of 5, a width past a warp
  check<float, kNorm>(3, 768, 2);    // GPT-2's width
  check<double, kNorm>(5, 1025, 4);  // past a block of 256
  check<float, kNorm>(520, 64, 16);  // tall: the weight sums in 2 slices of 260 rows, then added in order
  check<double, kNorm>(768, 40, 8);  // 3 slices
}

}  // namespace

TEST_CASE("rms_norm's cuda kernels emulated on the host match the cpu op, forward and backward") {
  check_all<Norm::Rms>();
}

TEST_CASE("layer_norm's cuda kernels (block and warp per row) emulated on the host match the cpu op") {
  check_all<Norm::LayerBlock>();
  check_all<Norm::LayerWarp>();
}
