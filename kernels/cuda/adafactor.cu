// Adafactor (kernels/adafactor.h), a few launches per tensor on its stream: the row factors (a block
// per row), the column factors (column partial sums over chunks of rows, then a pass adding them in
// order), each matrix's mean row, the block partial sums of U^2 and p^2, their totals, and the
// update. Sums are float64 in a fixed order (grids depend on the sizes only), so results repeat
// exactly from run to run. The float64 scratch comes from adafactor_update_scratch (scratch.cpp), which
// a plan for cuda books on meta too.
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/adafactor.cuh>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

namespace {

using namespace adafactor_kernels;

template <class T>
void step_tensor(const Tensors<T>& t, int64_t n, const Scalars& s, double* scratch, cudaStream_t stream) {
  const Scratch k(scratch, n, s);
  const int64_t R = s.rows, C = s.cols;
  if (R) {
    rows_kernel<<<grid_for(k.batch * R, 1), kThreads, 0, stream>>>(t, s, k.batch * R);
    const dim3 grid(unsigned((C + kThreads - 1) / kThreads), unsigned(std::min<int64_t>(k.chunks, 65535)),
                    unsigned(std::min<int64_t>(k.batch, 65535)));
    column_partials_kernel<<<grid, kThreads, 0, stream>>>(t, s, k.column_partials, k.batch, k.chunks);
    columns_kernel<<<grid_for(k.batch * C), kThreads, 0, stream>>>(t, s, k.column_partials, k.chunks, k.batch * C);
    mean_row_kernel<<<unsigned(k.batch), kThreads, 0, stream>>>(t, s, k.mean);
  }
  sums_kernel<<<unsigned(k.blocks), kThreads, 0, stream>>>(t, s, k.mean, k.partial, n);
  totals_kernel<<<1, 32, 0, stream>>>(k.partial, k.blocks, k.totals);
  update_kernel<<<grid_for(n), kThreads, 0, stream>>>(t, s, k.mean, k.totals, n);
  check_launch("Adafactor");
}

}  // namespace

void adafactor_update(const TensorLists& lists, const std::vector<adafactor::Scalars>& scalars) {
  const Tensor scratch = adafactor_update_scratch(lists, scalars)[0];  // each tensor's in turn, on one stream
  for (size_t j = 0; j < scalars.size(); ++j) {
    const Tensor& p = lists[0][j];
    const int64_t n = p.numel();
    if (n == 0) continue;
    const Scalars& s = scalars[j];
    dispatch_floating(p.dtype(), "Adafactor", [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto opt = [&](size_t k) { return lists[k][j].defined() ? dptr<T>(lists[k][j]) : nullptr; };
      step_tensor(Tensors<T>{dptr<T>(p), dptr<T>(lists[1][j]), opt(2), opt(3), opt(4)}, n, s, dptr<double>(scratch),
                  stream_for(p));
    });
  }
}

}  // namespace mg::cuda
