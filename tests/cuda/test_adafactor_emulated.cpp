// Adafactor's CUDA kernels (kernels/cuda/adafactor.cuh), launched on the host by emulated_device.h in
// adafactor.cu's order over the same float64 scratch layout, against the library's CPU kernel: batched
// matrices, a vector, the first moment, maximize, weight decay, several steps. The grids are smaller
// than the work (every stride loop runs, the column sums' row chunks and matrices included); the
// block sums' grid is the one adafactor.cu launches, whose size the partials' layout depends on.
// Sums add in another order on each side: float32 within 2e-5 of the largest value, float64 1e-12,
// float16 and bfloat16 two units of their last place.
#include <doctest/doctest.h>

#include "emulated_device.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/adafactor.cuh>

#include <cmath>
#include <vector>

#include <memgrad/ops/multi_tensor.h>

#include "emulated_harness.h"

namespace {
using namespace mg;
using namespace mg::cuda::adafactor_kernels;

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
  for (double w : want) scale = std::max(scale, std::fabs(w));
  return err / scale;
}

// Runs the kernels as adafactor.cu's step_tensor does, on small grids of 64 threads.
template <class T>
void emulated_step(const Tensors<T>& t, int64_t n, const Scalars& s, double* scratch) {
  const Scratch k(scratch, n, s);
  const unsigned threads = 64;
  const dim3 block(threads);
  if (s.rows) {
    emu::launch<rows_kernel<T>>({dim3(7), block}, t, s, k.batch * s.rows);
    const dim3 grid(unsigned((s.cols + threads - 1) / threads), 1, 2);  // y: one chunk at a time; z: 2 matrices
    emu::launch<column_partials_kernel<T>>({grid, block}, t, s, k.column_partials, k.batch, k.chunks);
    emu::launch<columns_kernel<T>>({dim3(3), block}, t, s, k.column_partials, k.chunks, k.batch * s.cols);
    emu::launch<mean_row_kernel<T>>({dim3(unsigned(k.batch)), block}, t, s, k.mean);
  }
  emu::launch<sums_kernel<T>>({dim3(unsigned(k.blocks)), block}, t, s, k.mean, k.partial, n);
  emu::launch<totals_kernel>({dim3(1), dim3(32)}, k.partial, k.blocks, k.totals);
  emu::launch<update_kernel<T>>({dim3(5), block}, t, s, k.mean, k.totals, n);
}

template <class T>
void check(const Shape& shape, double beta1, bool maximize) {
  const DType dt = dtype_of<T>::value;
  CAPTURE(shape_str(shape));
  CAPTURE(beta1);
  CAPTURE(dt);
  const bool factored = shape.size() > 1;
  Shape row_shape(shape.begin(), shape.end() - 1), col_shape = shape;
  if (factored) col_shape.erase(col_shape.end() - 2);
  manual_seed(uint64_t(numel_of(shape)));
  const int64_t n = numel_of(shape);
  Tensor p = randn(shape).to(dt), r = zeros(factored ? row_shape : shape, dt);
  Tensor c = factored ? zeros(col_shape, dt) : Tensor(), m = beta1 > 0 ? zeros(shape, dt) : Tensor();
  // the emulated side's state: host copies that its device tensors download into
  const Tensor pe = p.clone(), re = r.clone(), ce = factored ? c.clone() : Tensor(),
               me = beta1 > 0 ? m.clone() : Tensor();
  const emu::DeviceTensor dp("param", pe), dr("row_var", re), dc("col_var", ce), dm("exp_avg", me);
  Scalars s{};
  s.lr = 0.05, s.eps1 = dt == kFloat64 ? 2.2e-16 : 1.2e-7, s.eps2 = 1e-3, s.d = 1.0, s.weight_decay = 0.01;
  s.beta1 = beta1, s.maximize = maximize;
  if (factored) s.rows = shape[shape.size() - 2], s.cols = shape.back();
  emu::Buffer<double> scratch("scratch", static_cast<size_t>(scratch_elements(n, s.rows, s.cols)));
  const double tol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 2e-5 : emu::rtol_for(dt, 2);
  for (int step = 1; step <= 3; ++step) {
    CAPTURE(step);
    s.rho = std::min(s.lr, 1 / std::sqrt(double(step))), s.weight = std::pow(double(step), -0.8);
    Tensor g = randn(shape).to(dt);
    const emu::DeviceTensor dg("grad", g);
    detail::adafactor_update_({{p}, {g}, {r}, {c}, {m}}, {s});
    emulated_step<T>({dp.ptr<T>(), dg.ptr<T>(), dr.ptr<T>(), dc.ptr<T>(), dm.ptr<T>()}, n, s, scratch.data());
    for (const emu::DeviceTensor* d : {&dp, &dr, &dc, &dm}) d->download();
    CHECK(relative_error(pe.to_vector<double>(), p.to_vector<double>()) < tol);
    CHECK(relative_error(re.to_vector<double>(), r.to_vector<double>()) < tol);
    if (factored) CHECK(relative_error(ce.to_vector<double>(), c.to_vector<double>()) < tol);
    if (beta1 > 0) CHECK(relative_error(me.to_vector<double>(), m.to_vector<double>()) < tol);
  }
}

}  // namespace

TEST_CASE("Adafactor's cuda kernels emulated on the host match the cpu kernel") {
  check<float>({3, 600, 70}, 0, false);  // 3 matrices of 3 row chunks, 2 column tiles
  check<float>({1000}, 0.9, false);      // a vector: its variance, the first moment
  check<double>({517, 5}, 0.9, true);    // maximize
  check<float>({2, 5, 300}, 0, true);    // rows below a chunk, 5 column tiles
  check<Half>({70, 33}, 0.9, false);     // 16-bit parameters and state, float64 sums
  check<BFloat16>({300}, 0, false);
}
