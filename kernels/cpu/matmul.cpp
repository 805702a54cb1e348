// Batched GEMM on the library matmul's kernel variant picks (kernels/cpu/gemm.h: "auto", "onednn",
// "openblas", "eigen", as the build links them). Operands are used without copies when one of their two
// matrix strides is 1; the 16-bit types are widened to float and computed there, integer types always
// run on Eigen. Every variant copies exactly the same operands, so the ledger does not depend on the
// variant; their packing buffers are their own (oneDNN's and OpenBLAS's pools, Eigen's stack/heap),
// outside the ledger. Every product, and the fused attention's tiles, goes through gemm_serial: one
// thread's GEMM on the chosen library.
#include <omp.h>

#include <algorithm>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/gemm.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

// Products with fewer multiply-adds than this run on one thread.
constexpr int64_t kGemmGrain = int64_t(1) << 15;

// The matrix of a [B, R, C] operand with strides s as gemm_serial takes it: row-major with leading
// dimension s[1] when the column stride is 1, else the transpose of one with leading dimension s[2].
struct Layout {
  bool trans;
  int64_t ld;
};
Layout layout(const Strides& s, int64_t cols) {
  return s[2] == 1 || cols == 1 ? Layout{false, s[1]} : Layout{true, s[2]};
}

// out[b] = x[b] @ y[b] with A the arithmetic type; pointers index elements of type A.
// The work is cut into tasks (one product, or a block of rows or columns of one) that each run
// a single-threaded GEMM: Eigen's own parallel GEMM spin-waits for the other threads' packed
// panels, which wastes most of a step when the cores are shared.
template <class A>
void gemm_batched(const A* x, const Strides& xs, const A* y, const Strides& ys, A* out, int64_t B, int64_t M, int64_t K,
                  int64_t N) {
  const int64_t macs = M * N * K, threads = omp_get_max_threads();
  const bool by_rows = M >= N, serial = B * macs < kGemmGrain || threads == 1 || omp_in_parallel();
  // Split each product only when the batch alone cannot keep every thread busy.
  const int64_t side = by_rows ? M : N;
  const int64_t parts = serial || B >= threads ? 1 : std::min((threads + B - 1) / B, std::max<int64_t>(side / 16, 1));
  const Layout lx = layout(xs, K), ly = layout(ys, N);
  auto task = [&](int64_t t) {
    const int64_t b = t / parts, p = t % parts, lo = side * p / parts, hi = side * (p + 1) / parts;
    const A *xb = x + b * xs[0], *yb = y + b * ys[0];
    A* ob = out + b * M * N;
    if (by_rows)
      gemm_serial<A>(lx.trans, ly.trans, hi - lo, N, K, 1, xb + lo * xs[1], lx.ld, yb, ly.ld, 0, ob + lo * N, N);
    else
      gemm_serial<A>(lx.trans, ly.trans, M, hi - lo, K, 1, xb, lx.ld, yb + lo * ys[2], ly.ld, 0, ob + lo, N);
  };
  if (serial) {
    for (int64_t t = 0; t < B; ++t) task(t);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < B * parts; ++t) task(t);
}

// Eigen maps an operand without copying when one of its two matrix strides is 1.
bool mappable(const Tensor& t) { return t.stride(1) == 1 || t.stride(2) == 1 || t.size(1) == 1 || t.size(2) == 1; }

// The type a GEMM of `t` runs in: float for the 16-bit floats, int64 for bool, else t itself.
DType arithmetic_type(DType t) {
  DType r = t;
  dispatch(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    r = dtype_of<std::conditional_t<std::is_same_v<T, bool>, int64_t, opmath_t<T>>>::value;
  });
  return r;
}

}  // namespace

// What the GEMM runs on, and all the scratch the CPU's matmul allocates: {x, y, result}, operands
// Eigen can map (a contiguous copy otherwise) and, when the arithmetic type is wider than out's,
// widened copies of both and a wide result buffer (narrowed into out after). Nothing for K = 0 (a fill).
std::vector<Tensor> matmul_scratch(const Tensor& a, const Tensor& b, const Out& out) {
  if (a.size(2) == 0) return {};
  const DType wide = arithmetic_type(out.dtype());
  if (wide == out.dtype()) return {mappable(a) ? a : a.contiguous(), mappable(b) ? b : b.contiguous(), out};
  Tensor x = a.to(wide).contiguous(), y = b.to(wide).contiguous();
  return {x, y, empty_with(out.shape(), wide, out.device(), Category::Workspace)};
}

void matmul(const Tensor& a, const Tensor& b, const Out& out) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  if (K == 0) return fill(out, 0.0);
  const std::vector<Tensor> g = matmul_scratch(a, b, out);
  const Tensor &x = g[0], &y = g[1], &result = g[2];
  dispatch(result.dtype(), [&](auto tag) {
    using A = typename decltype(tag)::type;
    if constexpr (std::is_same_v<A, opmath_t<A>> && !std::is_same_v<A, bool>)
      gemm_batched<A>(ptr<A>(x), x.strides(), ptr<A>(y), y.strides(), ptr<A>(result), B, M, K, N);
  });
  if (!result.is_same(out)) copy(result, out);
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
