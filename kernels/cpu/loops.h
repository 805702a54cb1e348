// Building blocks of the CPU kernels (dtype dispatch is core/dispatch.h): a vectorizable exp and
// a strided N-operand loop that coalesces dims and runs rows in parallel with OpenMP.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include <omp.h>

#include <memgrad/core/dispatch.h>
#include <memgrad/core/small_vector.h>
#include <memgrad/core/tensor.h>
#include <memgrad/kernels/host_device.h>

namespace mg::cpu::MG_CPU_ISA_NS {

// NaN test that compiles (to false) for integer types.
template <class A>
inline bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>)
    return v != v;
  else
    return false;
}

// exp in plain arithmetic for float (Cephes' expf polynomial, within 2 ulp; 0 below -87.3,
// inf above 88.72), so that loops over it vectorize where libm's expf is a scalar call.
template <class A>
inline A exp_v(A x) {
  if constexpr (std::is_same_v<A, float>) {
    const float c = x != x ? 0.0f : std::min(std::max(x, -87.3f), 88.72f);  // NaN: no UB in the shifts below
    // n = round(c / ln 2) by adding 1.5 * 2^23, which also leaves n in the low mantissa bits
    const float shifted = c * 1.44269504088896341f + 12582912.0f, n = shifted - 12582912.0f;
    const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;  // c - n ln 2 in two parts
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    int32_t bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    const int32_t k = bits - 0x4B400000, k1 = k >> 1;  // 2^k as 2^k1 * 2^(k - k1): both stay normal
    const int32_t b1 = (k1 + 127) << 23, b2 = (k - k1 + 127) << 23;
    float s1, s2;
    std::memcpy(&s1, &b1, sizeof s1);
    std::memcpy(&s2, &b2, sizeof s2);
    const float e = y * s1 * s2;
    return x < -87.3f ? 0.0f : (x > 88.72f ? std::numeric_limits<float>::infinity() : (x != x ? x : e));
  } else {
    return std::exp(x);
  }
}

template <class T>
inline T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// Loops of at least this many elements run on several threads.
inline constexpr int64_t kParallelGrain = 32768;

// Calls f(i) for i < n: on the OpenMP threads when `parallel`, else in a plain loop. Not
// `omp parallel for if (...)`: libgomp enters a one-thread region even when the condition is
// false, with a team, a barrier and a futex syscall, which is most of a small op's kernel time.
// The loop over f is compiled once, for both: each thread runs a contiguous share of [0, n), as
// schedule(static) deals them. (Inlined in both places, f's code was there twice in every kernel,
// and four times in for_each_row's: a kernel file's compile time, for one call per share.)
template <class F>
void parallel_for(int64_t n, bool parallel, F&& f) {
  auto run = [&f](int64_t lo, int64_t hi) __attribute__((noinline)) {
    for (int64_t i = lo; i < hi; ++i) f(i);
  };
  if (!parallel) return run(0, n);
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
    const int64_t q = n / threads, r = n % threads, lo = t * q + std::min(t, r);
    run(lo, lo + q + (t < r ? 1 : 0));
  }
}

// u[k] = random_uniform(seed, offset, first + k) for k < n, with one Philox evaluation per four
// elements (random_uniform evaluates a whole block of four words for each).
inline void random_uniforms(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, float* u) {
  for (int64_t k = 0; k < n;) {
    const uint64_t at = offset + first + uint64_t(k);
    const kernels::Philox4 block = kernels::philox(seed, at >> 2);
    for (uint64_t w = at & 3; w < 4 && k < n; ++w) u[k++] = kernels::uniform_from_word(block.v[w]);
  }
}

// Calls f(k0, u, m) over [0, n) in chunks of at most kRandomChunk elements, where u[k] =
// random_uniform(seed, offset, first + k0 + k) for k < m: a run's draws without a buffer of n.
inline constexpr int64_t kRandomChunk = 1024;
template <class F>
void for_each_uniform(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, F&& f) {
  float u[kRandomChunk];
  for (int64_t k0 = 0; k0 < n; k0 += kRandomChunk) {
    const int64_t m = std::min(kRandomChunk, n - k0);
    random_uniforms(seed, offset, first + uint64_t(k0), m, u);
    f(k0, static_cast<const float*>(u), m);
  }
}

// Row max, vectorized (omp simd reductions are exempt from the NaN/signed-zero rules).
template <class T, class A = opmath_t<T>>
A row_max(const T* row, int64_t n) {
  A mx = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < n; ++c) mx = std::max(mx, A(load(row[c])));
  return mx;
}

// The sum of f(c) over c < n: in SIMD lanes of A within blocks of kSumBlock, the blocks added in
// double, so the rounding error grows with kSumBlock / lanes + n / kSumBlock rather than n.
// Give it a lambda that captures by value: GCC 12 left cross-entropy's exp sums scalar while
// their lambda held `row` and `max` by reference (checked with objdump: no ymm instruction).
// A whole block of zeros adds exactly 0: a sum may stop at the block where its nonzero terms end.
constexpr int64_t kSumBlock = 256;
template <class A, class F>
double blocked_sum(int64_t n, F f) {
  double total = 0;
  for (int64_t lo = 0; lo < n; lo += kSumBlock) {
    const int64_t hi = std::min(n, lo + kSumBlock);
    A s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = lo; c < hi; ++c) s += f(c);
    total += double(s);
  }
  return total;
}

// Iterates over N tensors of one shape with their own element strides. `row(p, n, s)` gets
// the element offsets p[k] of a run's first element, its length n and the inner strides s.
// Long rows are cut into pieces so that one big row also spreads over the threads.
template <size_t N, class Row>
void for_each_row(const Shape& shape, const std::array<const Strides*, N>& strides, Row&& row) {
  int64_t total = numel_of(shape);
  if (total == 0) return;
  // Drop size-1 dims and merge dims that are contiguous in every operand.
  SmallVector<int64_t, 8> sz;
  SmallVector<std::array<int64_t, N>, 8> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k) s[k] = (*strides[k])[d];
    bool merge = !sz.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = st.back()[k] == s[k] * shape[d];
    if (merge) {
      sz.back() *= shape[d];
      st.back() = s;
    } else {
      sz.push_back(shape[d]);
      st.push_back(s);
    }
  }
  if (sz.empty()) sz.push_back(1), st.push_back({});
  const int64_t inner = sz.back(), rows = total / inner, nd = int64_t(sz.size()) - 1;
  const std::array<int64_t, N> inner_st = st.back();
  const int64_t piece = std::min<int64_t>(inner, kParallelGrain / 2), pieces = (inner + piece - 1) / piece;
  const bool parallel = total >= kParallelGrain && rows * pieces > 1;
  // The offsets of row r's first element, and its index in the outer dims (into idx).
  auto row_start = [&](int64_t r, SmallVector<int64_t, 8>& idx) {
    std::array<int64_t, N> p{};
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[size_t(d)] = r % sz[size_t(d)];
      r /= sz[size_t(d)];
      for (size_t k = 0; k < N; ++k) p[k] += idx[size_t(d)] * st[size_t(d)][k];
    }
    return p;
  };
  if (pieces == 1 && nd > 0) {
    // Short rows (a transpose's copy, say): each thread takes a run of rows and steps the row's
    // index like an odometer; working each row's offsets out by division cost more than its copy.
    const int64_t chunks = parallel ? std::min<int64_t>(rows, 64) : 1;
    parallel_for(chunks, parallel, [&](int64_t c) {
      const int64_t r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
      SmallVector<int64_t, 8> idx(size_t(nd), 0);
      std::array<int64_t, N> p = row_start(r0, idx);
      for (int64_t r = r0; r < r1; ++r) {
        row(p, inner, inner_st);
        for (int64_t d = nd - 1; d >= 0; --d) {  // the next row: carry into the outer dims
          for (size_t k = 0; k < N; ++k) p[k] += st[size_t(d)][k];
          if (++idx[size_t(d)] < sz[size_t(d)]) break;
          for (size_t k = 0; k < N; ++k) p[k] -= sz[size_t(d)] * st[size_t(d)][k];
          idx[size_t(d)] = 0;
        }
      }
    });
    return;
  }
  parallel_for(rows * pieces, parallel, [&](int64_t u) {
    const int64_t start = (u % pieces) * piece;
    SmallVector<int64_t, 8> idx(size_t(std::max<int64_t>(nd, 0)), 0);
    std::array<int64_t, N> p = row_start(u / pieces, idx);
    for (size_t k = 0; k < N; ++k) p[k] += start * inner_st[k];
    row(p, std::min(piece, inner - start), inner_st);
  });
}

// Calls f(line, base, stride) for every (outer, inner) line of length r of a contiguous
// [outer, r, inner] tensor, in parallel: the layout of reductions and softmax.
template <class F>
void for_each_line(int64_t outer, int64_t r, int64_t inner, F f) {
  int64_t lines = outer * inner;
  parallel_for(lines, lines * r >= kParallelGrain && lines > 1, [&](int64_t l) {
    int64_t o = l / inner, i = l % inner;
    f(l, o * r * inner + i, inner);
  });
}

namespace detail {
// Flattened: a formula shared by several dtypes' loops (gelu's gradient runs in float for float,
// half and bfloat16) is otherwise kept out of line, and a loop that calls a function is scalar.
template <class Out, class... In, class F, size_t N, size_t... I>
__attribute__((flatten)) void map_run(Out* o, const std::tuple<const In*...>& in, const std::array<int64_t, N>& p,
                                      int64_t n, const std::array<int64_t, N>& s, F& f, std::index_sequence<I...>) {
  Out* ob = o + p[0];
  std::tuple<const In*...> b{(std::get<I>(in) + p[I + 1])...};
  if (s[0] == 1 && ((s[I + 1] == 1) && ...)) {
    // An input that is the output itself (an op in place) fails the compiler's overlap check and
    // would take its scalar loop: the same elements or disjoint ones are safe in SIMD lanes.
    // (With no inputs, as for a fill, the check folds to true and `apart` goes unused.)
    [[maybe_unused]] auto apart = [&](const auto* q) {
      const auto lo = reinterpret_cast<uintptr_t>(q), hi = reinterpret_cast<uintptr_t>(q + n),
                 olo = reinterpret_cast<uintptr_t>(ob), ohi = reinterpret_cast<uintptr_t>(ob + n);
      return lo == olo || hi <= olo || ohi <= lo;
    };
    if ((apart(std::get<I>(b)) && ...)) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) ob[i] = store<Out>(f(load(std::get<I>(b)[i])...));
      return;
    }
  }
  // Strided, or overlapping: element by element in order (unit strides too, s holding ones).
  for (int64_t i = 0; i < n; ++i) ob[i * s[0]] = store<Out>(f(load(std::get<I>(b)[i * s[I + 1]])...));
}
}  // namespace detail

// Elementwise map: out[i] = f(load(in[i])...), for inputs already expanded to out's shape.
template <class Out, class... In, class F>
void map(const Tensor& out, F f, const Each<In, Tensor>&... in) {
  constexpr size_t N = 1 + sizeof...(In);
  std::array<const Strides*, N> strides{&out.strides(), &in.strides()...};
  Out* o = ptr<Out>(out);
  std::tuple<const In*...> ins{ptr<In>(in)...};
  for_each_row<N>(out.shape(), strides,
                  [&](const std::array<int64_t, N>& p, int64_t n, const std::array<int64_t, N>& s) {
                    detail::map_run<Out, In...>(o, ins, p, n, s, f, std::index_sequence_for<In...>{});
                  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
