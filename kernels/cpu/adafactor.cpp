// Adafactor (kernels/adafactor.h) over one tensor after another: the factored second moment's row
// and column sums, then the sums of U^2 and p^2 for the clipping and the relative step, then the
// update, each pass parallel over rows (or elements) with float64 sums in a fixed order. No scratch:
// U is recomputed in the last pass rather than stored.
#include <memgrad/kernels/adafactor.h>
#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu {

namespace {

using namespace kernels::adafactor;

// sum of f(i) for i < n in float64, over 64 fixed chunks added in order: the same on any thread count.
template <class F>
double fixed_sum(int64_t n, F&& f) {
  constexpr int64_t kChunks = 64;
  double part[kChunks] = {};
  const int64_t per = (n + kChunks - 1) / kChunks;
  parallel_for(kChunks, n >= kParallelGrain, [&](int64_t k) {
    double s = 0;
    for (int64_t i = k * per, end = std::min(n, (k + 1) * per); i < end; ++i) s += f(i);
    part[k] = s;
  });
  double total = 0;
  for (double s : part) total += s;
  return total;
}

template <class T>
struct Tensors {
  T *p, *g, *r, *c, *m;  // c: col_var (null for a vector, where r is the variance); m: exp_avg or null
};

template <class T, class A = opmath_t<T>>
A grad(const Tensors<T>& t, int64_t e, bool maximize) {
  const A g = load(t.g[e]);
  return maximize ? -g : g;
}

// The mean row factor of matrix b, clamped to eps1 (as torch).
template <class T, class A = opmath_t<T>>
A mean_row(const Tensors<T>& t, int64_t b, const Scalars& s) {
  double sum = 0;
  for (int64_t i = 0; i < s.rows; ++i) sum += load(t.r[b * s.rows + i]);
  const A mean = A(sum / double(s.rows)), eps1 = A(s.eps1);
  return mean > eps1 ? mean : eps1;
}

// One matrix [R, C] of a factored tensor: updates its row and column factors and returns its mean
// row factor.
template <class T, class A = opmath_t<T>>
A factors(const Tensors<T>& t, int64_t b, const Scalars& s) {
  const int64_t R = s.rows, C = s.cols, base = b * R * C;
  const A w = A(s.weight);
  parallel_for(R, R * C >= kParallelGrain, [&](int64_t i) {
    double sum = 0;
    for (int64_t j = 0; j < C; ++j) {
      const double g = grad(t, base + i * C + j, s.maximize);
      sum += g * g;
    }
    T& r = t.r[b * R + i];
    r = store<T>(lerp(load(r), A(sum / double(C)), w));
  });
  constexpr int64_t kCols = 64;  // columns summed together, a few cache lines of each row
  parallel_for((C + kCols - 1) / kCols, R * C >= kParallelGrain, [&](int64_t k) {
    const int64_t j0 = k * kCols, width = std::min(kCols, C - j0);
    double sum[kCols] = {};
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < width; ++j) {
        const double g = grad(t, base + i * C + j0 + j, s.maximize);
        sum[j] += g * g;
      }
    for (int64_t j = 0; j < width; ++j) {
      T& c = t.c[b * C + j0 + j];
      c = store<T>(lerp(load(c), A(sum[j] / double(R)), w));
    }
  });
  return mean_row(t, b, s);
}

template <class T>
void step_tensor(const Tensors<T>& t, int64_t n, const Scalars& s) {
  using A = opmath_t<T>;
  const A eps1_sq = A(s.eps1 * s.eps1), w = A(s.weight);
  const double sum_p2 = fixed_sum(n, [&](int64_t e) {
    const double p = load(t.p[e]);
    return p * p;
  });
  const int64_t R = s.rows, C = s.cols, batch = R ? n / (R * C) : 0;
  auto u_factored = [&](int64_t b, A mean, int64_t i, int64_t j) {
    const int64_t e = (b * R + i) * C + j;
    return unclipped(grad(t, e, s.maximize), factored(load(t.r[b * R + i]), load(t.c[b * C + j]), mean), eps1_sq);
  };
  double sum_u2 = 0;
  if (R) {
    for (int64_t b = 0; b < batch; ++b) {
      const A mean = factors(t, b, s);
      sum_u2 += fixed_sum(R, [&](int64_t i) {
        double row = 0;
        for (int64_t j = 0; j < C; ++j) {
          const double u = u_factored(b, mean, i, j);
          row += u * u;
        }
        return row;
      });
    }
  } else {
    sum_u2 = fixed_sum(n, [&](int64_t e) {
      const A g = grad(t, e, s.maximize);
      const A v = lerp(load(t.r[e]), g * g, w);
      t.r[e] = store<T>(v);
      const double u = unclipped(g, load(t.r[e]), eps1_sq);
      return u * u;
    });
  }
  const Step<A> st = make_step<A>(s, sum_u2, sum_p2, n);
  auto update = [&](int64_t e, A u) {
    A m = t.m ? load(t.m[e]) : A(0);
    t.p[e] = store<T>(apply(load(t.p[e]), u, &m, st));
    if (t.m) t.m[e] = store<T>(m);
  };
  if (R) {
    for (int64_t b = 0; b < batch; ++b) {
      const A mean = mean_row(t, b, s);
      parallel_for(R, R * C >= kParallelGrain, [&](int64_t i) {
        for (int64_t j = 0; j < C; ++j) update((b * R + i) * C + j, u_factored(b, mean, i, j));
      });
    }
  } else {
    parallel_for(n, n >= kParallelGrain,
                 [&](int64_t e) { update(e, unclipped(grad(t, e, s.maximize), load(t.r[e]), eps1_sq)); });
  }
}

}  // namespace

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

}  // namespace mg::cpu
