// Reductions and arg reductions on a contiguous [outer, r, inner] view, along r. Loops for
// float32/float16/bfloat16 at every level, for other dtypes at the baseline's (cpu_kernels.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>
#include <memgrad/kernels/scan.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {
// Accumulator type: double for floating inputs, int64 for integers and bool.
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, int64_t>;
}  // namespace

void reduce(ReduceOp op, const Tensor& x, const Out& out, int64_t outer, int64_t r, int64_t inner) {
  MG_CPU_LOWER_UNLESS(level_has_all(x.dtype(), out.dtype()), reduce, op, x, out, outer, r, inner);
  dispatch_level(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = acc_t<T>;
    const T* xp = ptr<T>(x);
    dispatch_level(out.dtype(), [&](auto ot) {
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
      if (op == ReduceOp::LogSumExp) {
        if constexpr (std::is_floating_point_v<opmath_t<T>>) {
          for_each_line(outer, r, inner, [&](int64_t l, int64_t base, int64_t st) {
            double mx = -std::numeric_limits<double>::infinity(), sum = 0;
            for (int64_t k = 0; k < r; ++k) {
              double v = double(load(xp[base + k * st]));
              mx = is_nan(v) || v > mx ? v : mx;  // NaN sticks: it is never greater than anything
              if (is_nan(v)) break;
            }
            if (!std::isfinite(mx)) {  // NaN, or a line of -inf (or containing +inf)
              op_[l] = store<O>(mx);
              return;
            }
            for (int64_t k = 0; k < r; ++k) sum += std::exp(double(load(xp[base + k * st])) - mx);
            op_[l] = store<O>(mx + std::log(sum));
          });
        }
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

void scan(ScanOp op, const Tensor& x, const Out& out, int64_t outer, int64_t r, int64_t inner) {
  MG_CPU_LOWER_UNLESS(level_has_all(x.dtype(), out.dtype()), scan, op, x, out, outer, r, inner);
  dispatch_level(x.dtype(), [&](auto xt) {
    using T = typename decltype(xt)::type;
    using A = acc_t<T>;  // double for floating x, as PyTorch's CPU scans; int64 otherwise
    const T* xp = ptr<T>(x);
    dispatch_level(out.dtype(), [&](auto ot) {
      using O = typename decltype(ot)::type;
      O* yp = ptr<O>(out);
      const bool sum = op == ScanOp::Sum;
      for_each_line(outer, r, inner, [&](int64_t, int64_t base, int64_t st) {
        A acc = sum ? A(0) : A(1);
        for (int64_t k = 0; k < r; ++k) {
          const A v = A(load(xp[base + k * st]));
          acc = sum ? acc + v : acc * v;
          yp[base + k * st] = store<O>(acc);
        }
      });
    });
  });
}

void cumprod_backward(const Tensor& grad, const Tensor& x, const Tensor& out, const Out& grad_in, int64_t outer,
                      int64_t r, int64_t inner) {
  MG_CPU_LOWER_UNLESS(level_has(x.dtype()), cumprod_backward, grad, x, out, grad_in, outer, r, inner);
  dispatch_floating_level(x.dtype(), "cumprod_backward", [&](auto xt) {
    using T = typename decltype(xt)::type;
    const T *gp = ptr<T>(grad), *xp = ptr<T>(x), *yp = ptr<T>(out);
    T* dp = ptr<T>(grad_in);
    for_each_line(outer, r, inner, [&](int64_t, int64_t base, int64_t st) {
      auto at = [&](const T* p, int64_t k) { return double(load(p[base + k * st])); };
      kernels::cumprod_grad_line(
          r, [&](int64_t k) { return at(xp, k); }, [&](int64_t k) { return at(yp, k); },
          [&](int64_t k) { return at(gp, k); }, [&](int64_t k, double v) { dp[base + k * st] = store<T>(v); });
    });
  });
}

void arg_reduce(ReduceOp op, const Tensor& x, const Out& values, const Out& indices, int64_t outer, int64_t r,
                int64_t inner) {
  MG_CPU_LOWER_UNLESS(level_has(x.dtype()), arg_reduce, op, x, values, indices, outer, r, inner);
  dispatch_level(x.dtype(), [&](auto xt) {
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

}  // namespace mg::cpu::MG_CPU_ISA_NS
