// Adafactor (kernels/adafactor.h) over one tensor after another: the factored second moment's row
// and column sums, then the sums of U^2 and p^2 for the clipping and the relative step, then the
// update, each pass parallel over rows (or chunks of elements) with float64 sums in a fixed order,
// and vectorized along rows. No scratch: U is recomputed in the last pass rather than stored.
#include <vector>

#include <memgrad/kernels/adafactor.h>
#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

using namespace kernels::adafactor;

// Calls f(k, first, end) for 64 fixed chunks [first, end) of [0, n), in parallel when `work` (the
// elements they cover) is large.
constexpr int64_t kChunks = 64;
template <class F>
void for_chunks(int64_t n, int64_t work, F&& f) {
  const int64_t per = (n + kChunks - 1) / kChunks;
  parallel_for(kChunks, work >= kParallelGrain,
               [&](int64_t k) { f(k, std::min(n, k * per), std::min(n, (k + 1) * per)); });
}
// The sum of part(first, end) over the chunks, added in order: the same on any number of threads.
template <class F>
double fixed_sum(int64_t n, int64_t work, F&& part) {
  double parts[kChunks] = {};
  for_chunks(n, work, [&](int64_t k, int64_t first, int64_t end) { parts[k] = part(first, end); });
  double total = 0;
  for (double s : parts) total += s;
  return total;
}

// sum of x[i]^2 for i in [first, end), in float64.
template <class T>
double sum_squares(const T* x, int64_t first, int64_t end) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = first; i < end; ++i) {
    const double v = load(x[i]);
    s += v * v;
  }
  return s;
}

template <class T>
struct Tensors {
  T *p, *g, *r, *c, *m;  // c: col_var (null for a vector, where r is the variance); m: exp_avg or null
};

// The mean row factor of matrix b, clamped to eps1 (as torch).
template <class T, class A = opmath_t<T>>
A mean_row(const Tensors<T>& t, int64_t b, const Scalars& s) {
  double sum = 0;
  for (int64_t i = 0; i < s.rows; ++i) sum += load(t.r[b * s.rows + i]);
  const A mean = A(sum / double(s.rows)), eps1 = A(s.eps1);
  return mean > eps1 ? mean : eps1;
}

// One matrix [R, C] of a factored tensor: updates its row and column factors (the gradient's sign,
// which maximize flips, does not enter them) and returns its mean row factor.
template <class T, class A = opmath_t<T>>
A factors(const Tensors<T>& t, int64_t b, const Scalars& s) {
  const int64_t R = s.rows, C = s.cols;
  const T* g = t.g + b * R * C;
  const A w = A(s.weight);
  parallel_for(R, R * C >= kParallelGrain, [&](int64_t i) {
    T& r = t.r[b * R + i];
    r = store<T>(lerp(A(load(r)), A(sum_squares(g + i * C, 0, C) / double(C)), w));
  });
  constexpr int64_t kCols = 64;  // columns summed together, a few cache lines of each row
  parallel_for((C + kCols - 1) / kCols, R * C >= kParallelGrain, [&](int64_t k) {
    const int64_t j0 = k * kCols, width = std::min(kCols, C - j0);
    double sum[kCols] = {};
    for (int64_t i = 0; i < R; ++i) {
      const T* row = g + i * C + j0;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) {
        const double v = load(row[j]);
        sum[j] += v * v;
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      T& c = t.c[b * C + j0 + j];
      c = store<T>(lerp(A(load(c)), A(sum[j] / double(R)), w));
    }
  });
  return mean_row(t, b, s);
}

template <class T>
void step_tensor(const Tensors<T>& t, int64_t n, const Scalars& s) {
  using A = opmath_t<T>;
  const A eps1_sq = A(s.eps1 * s.eps1), w = A(s.weight), sign = s.maximize ? A(-1) : A(1);
  const double sum_p2 = fixed_sum(n, n, [&](int64_t first, int64_t end) { return sum_squares(t.p, first, end); });
  const int64_t R = s.rows, C = s.cols, batch = R ? n / (R * C) : 0;
  // U along row i of matrix b, unclipped: u[j] for j < C.
  auto row_u = [&](int64_t b, A mean, int64_t i, A* u) {
    const A r = load(t.r[b * R + i]);
    const T *g = t.g + (b * R + i) * C, *c = t.c + b * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) u[j] = unclipped(sign * A(load(g[j])), factored(r, A(load(c[j])), mean), eps1_sq);
  };
  constexpr int64_t kPiece = 256;  // a vector's elements at a time (its variance updated as it goes)
  auto piece_u = [&](int64_t first, int64_t end, A* u, bool update_variance) {
#pragma omp simd
    for (int64_t e = first; e < end; ++e) {
      const A g = sign * A(load(t.g[e]));
      if (update_variance) t.r[e] = store<T>(lerp(A(load(t.r[e])), g * g, w));
      u[e - first] = unclipped(g, A(load(t.r[e])), eps1_sq);
    }
  };
  auto sum_u2 = [](const A* u, int64_t len) {
    double s2 = 0;
#pragma omp simd reduction(+ : s2)
    for (int64_t j = 0; j < len; ++j) s2 += double(u[j]) * double(u[j]);
    return s2;
  };
  double u2 = 0;
  if (R) {
    for (int64_t b = 0; b < batch; ++b) {
      const A mean = factors(t, b, s);
      u2 += fixed_sum(R, R * C, [&](int64_t first, int64_t end) {
        std::vector<A> u(static_cast<size_t>(C));  // a row's U (outside the ledger, as the GEMMs' packing buffers)
        double s2 = 0;
        for (int64_t i = first; i < end; ++i) row_u(b, mean, i, u.data()), s2 += sum_u2(u.data(), C);
        return s2;
      });
    }
  } else {
    u2 = fixed_sum(n, n, [&](int64_t first, int64_t end) {
      A u[kPiece];
      double s2 = 0;
      for (int64_t e = first; e < end; e += kPiece) {
        const int64_t len = std::min(kPiece, end - e);
        piece_u(e, e + len, u, true);
        s2 += sum_u2(u, len);
      }
      return s2;
    });
  }
  const Step<A> st = make_step<A>(s, u2, sum_p2, n);
  // Updates elements [first, first + len) from their U.
  auto update = [&](int64_t first, int64_t len, const A* u) {
    T *p = t.p + first, *m = t.m ? t.m + first : nullptr;
    if (!m) {
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) p[j] = store<T>(apply<A>(load(p[j]), u[j], nullptr, st));
      return;
    }
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      A mj = load(m[j]);
      p[j] = store<T>(apply(A(load(p[j])), u[j], &mj, st));
      m[j] = store<T>(mj);
    }
  };
  if (R) {
    for (int64_t b = 0; b < batch; ++b) {
      const A mean = mean_row(t, b, s);
      for_chunks(R, R * C, [&](int64_t, int64_t first, int64_t end) {
        std::vector<A> u(static_cast<size_t>(C));
        for (int64_t i = first; i < end; ++i) row_u(b, mean, i, u.data()), update((b * R + i) * C, C, u.data());
      });
    }
  } else {
    parallel_for((n + kPiece - 1) / kPiece, n >= kParallelGrain, [&](int64_t k) {
      A u[kPiece];
      const int64_t first = k * kPiece, len = std::min(kPiece, n - first);
      piece_u(first, first + len, u, false);
      update(first, len, u);
    });
  }
}

}  // namespace

std::vector<Tensor> adafactor_update_scratch(const TensorLists&, const std::vector<adafactor::Scalars>&) {
  return {};  // U is recomputed in the last pass rather than stored
}

void adafactor_update(const TensorLists& lists, const std::vector<adafactor::Scalars>& scalars) {
  for (size_t j = 0; j < scalars.size(); ++j) {
    const Tensor& p = lists[0][j];
    if (p.numel() == 0) continue;
    dispatch_floating(p.dtype(), "Adafactor", [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto opt = [&](size_t k) { return lists[k][j].defined() ? ptr<T>(lists[k][j]) : nullptr; };
      step_tensor(Tensors<T>{ptr<T>(p), ptr<T>(lists[1][j]), opt(2), opt(3), opt(4)}, p.numel(), scalars[j]);
    });
  }
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
