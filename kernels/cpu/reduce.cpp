// Reductions and arg reductions on a contiguous [outer, r, inner] view, along r.
#include <algorithm>
#include <cmath>
#include <limits>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu {

namespace {
// Accumulator type: double for floating inputs, int64 for integers and bool.
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;
}  // namespace

void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner) {
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = acc_t<T>;
    const T* xp = ptr<T>(x);
    dispatch(out.dtype(), [&](auto ot) {
      using O = typename decltype(ot)::type;
      O* op_ = ptr<O>(out);
      if (op == ReduceOp::Sum && inner > 1) {  // add whole rows with unit stride, a block of columns per task
        constexpr int64_t kCols = 256;
        const int64_t blocks = (inner + kCols - 1) / kCols;
        parallel_for(outer * blocks, outer * r * inner >= kParallelGrain && outer * blocks > 1, [&](int64_t t) {
          const int64_t o = t / blocks, j0 = t % blocks * kCols, n = std::min(kCols, inner - j0);
          A acc[kCols] = {};
          const T* p = xp + o * r * inner + j0;
          for (int64_t k = 0; k < r; ++k, p += inner)
            for (int64_t j = 0; j < n; ++j) acc[j] += A(load(p[j]));
          for (int64_t j = 0; j < n; ++j) op_[o * inner + j0 + j] = store<O>(acc[j]);
        });
        return;
      }
      if (op == ReduceOp::Sum) {
        for_each_line(outer, r, inner, [&](int64_t l, int64_t base, int64_t st) {
          A acc = 0;
          const T* p = xp + base;
          if (st == 1) {
#pragma omp simd reduction(+ : acc)
            for (int64_t k = 0; k < r; ++k) acc += A(load(p[k]));
          } else {
            for (int64_t k = 0; k < r; ++k) acc += A(load(p[k * st]));
          }
          op_[l] = store<O>(acc);
        });
        return;
      }
      const bool is_max = op == ReduceOp::Max;
      for_each_line(outer, r, inner, [&](int64_t l, int64_t base, int64_t st) {
        auto best = load(xp[base]);
        for (int64_t k = 1; k < r; ++k) {
          auto v = load(xp[base + k * st]);
          if (is_nan(v)) {  // NaN propagates
            best = v;
            break;
          }
          if (is_max ? v > best : v < best) best = v;
        }
        op_[l] = store<O>(best);
      });
    });
  });
}

void arg_reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer, int64_t r,
                int64_t inner) {
  dispatch(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T* xp = ptr<T>(x);
    T* vp = values.defined() ? ptr<T>(values) : nullptr;
    int64_t* ip = ptr<int64_t>(indices);
    const bool is_max = op == ReduceOp::Max;
    for_each_line(outer, r, inner, [&](int64_t l, int64_t base, int64_t st) {
      auto best = load(xp[base]);
      int64_t bi = 0;
      for (int64_t k = 1; k < r && !is_nan(best); ++k) {
        auto v = load(xp[base + k * st]);
        if (is_nan(v) || (is_max ? v > best : v < best)) best = v, bi = k;  // first extreme; NaN wins
      }
      if (vp) vp[l] = xp[base + bi * st];
      ip[l] = bi;
    });
  });
}

}  // namespace mg::cpu
