// Fused attention on the CPU: for each batch*head, blocks of query rows meet all the keys they
// may see through single-threaded GEMMs (gemm_serial: the library matmul's variant picks). The
// [rows, Tk] tile is per-thread scratch for the call (like the GEMMs' packing buffers, outside the
// ledger); no [Tq, Tk] tensor exists.
#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/gemm.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

using kernels::AttentionParams;
template <class A>
using Mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class A>
using Tile = Eigen::Map<Mat<A>>;

constexpr int64_t kBlockRows = 64;

// One thread's matrices for one kernel call, each slot's memory kept from block to block and head to
// head: a fresh Eigen matrix per block cost an mmap, its page faults and a munmap (a fifth of the
// backward's time, in the kernel).
enum Slot { kK, kV, kDK, kDV, kQ, kDO, kO, kS, kPd, kDS, kOut, kSlots };
template <class A>
struct Scratch {
  std::vector<A> buf[kSlots];
  Tile<A> get(Slot s, int64_t rows, int64_t cols) {
    if (int64_t(buf[s].size()) < rows * cols) buf[s].resize(size_t(rows * cols));
    return Tile<A>(buf[s].data(), rows, cols);
  }
};

// Rows [r0, r0 + n) of the row-major [*, D] matrix at p, widened to A, in slot s.
template <class A, class T>
Tile<A> rows(Scratch<A>& sc, Slot s, const T* p, int64_t r0, int64_t n, int64_t D) {
  Tile<A> m = sc.get(s, n, D);
  for (int64_t i = 0; i < n * D; ++i) m.data()[i] = A(load(p[r0 * D + i]));
  return m;
}
template <class T, class A>
void store_rows(const Tile<A>& m, T* p, int64_t r0) {
  for (int64_t i = 0; i < m.size(); ++i) p[r0 * m.cols() + i] = store<T>(m.data()[i]);
}

// Keys visible to query rows [i0, i0 + n): all, or those up to the last row when causal.
int64_t visible_keys(const AttentionParams& p, int64_t i0, int64_t n, int64_t Tk) {
  return p.causal ? std::min(Tk, i0 + n) : Tk;
}

// alpha a @ b, a m x k (k x m stored when trans_a), b k x n (n x k stored when trans_b), on
// row-major matrices that start at their first row: into slot s, or added to c's first rows.
template <class A>
Tile<A> product(Scratch<A>& sc, Slot s, bool trans_a, const Tile<A>& a, bool trans_b, const Tile<A>& b, int64_t m,
                int64_t k, int64_t n, A alpha = 1) {
  Tile<A> c = sc.get(s, m, n);
  gemm_serial<A>(trans_a, trans_b, m, n, k, alpha, a.data(), a.cols(), b.data(), b.cols(), 0, c.data(), n);
  return c;
}
template <class A>
void add_product(Tile<A>& c, bool trans_a, const Tile<A>& a, const Tile<A>& b, int64_t m, int64_t k) {
  gemm_serial<A>(trans_a, false, m, c.cols(), k, 1, a.data(), a.cols(), b.data(), b.cols(), 1, c.data(), c.cols());
}

// scale * Q K^T + mask for query rows from i0 of head bh, in slot kS: -inf where the causal or a
// bool mask hides a key, an additive mask added. `mask` is the mask's data (T for additive masks).
template <class A, class T>
Tile<A> scores(Scratch<A>& sc, const Tile<A>& Q, const Tile<A>& K, int64_t bh, int64_t i0, int64_t kn,
               const AttentionParams& p, const void* mask) {
  constexpr A kHidden = -std::numeric_limits<A>::infinity();
  Tile<A> S = product(sc, kS, false, Q, true, K, Q.rows(), Q.cols(), kn, A(p.scale));
  using Kind = kernels::AttentionMask::Kind;
  if (p.mask.kind != Kind::None)
    for (int64_t r = 0; r < S.rows(); ++r)
      for (int64_t j = 0; j < kn; ++j) {
        const int64_t off = p.mask.offset(bh, i0 + r, j);
        if (p.mask.kind == Kind::Bool)
          S(r, j) = static_cast<const bool*>(mask)[off] ? S(r, j) : kHidden;
        else
          S(r, j) += A(load(static_cast<const T*>(mask)[off]));
      }
  if (p.causal)
    for (int64_t r = 0; r < S.rows(); ++r)
      for (int64_t j = i0 + r + 1; j < kn; ++j) S(r, j) = kHidden;
  return S;
}

// S <- exp(S - lse) row by row: backward's probabilities from the saved lse (0 in rows that see no key).
template <class A>
void probabilities(Tile<A>& S, const A* lse) {
  for (int64_t r = 0; r < S.rows(); ++r) {
    const A shift = lse[r];
    A* s = S.data() + r * S.cols();
    if (std::isinf(shift))
      std::fill(s, s + S.cols(), A(0));
    else
      for (int64_t j = 0; j < S.cols(); ++j) s[j] = exp_v(s[j] - shift);
  }
}

// M(r, j) <- M(r, j) * keep / (1 - p) with the dropout mask of query i0 + r, key j of head bh.
template <class A>
void apply_dropout(Tile<A>& M, int64_t bh, int64_t i0, int64_t Tq, int64_t Tk, const AttentionParams& p) {
  if (p.dropout_p == 0) return;
  const A keep_scale = A(1.0 / (1.0 - p.dropout_p));
  const float pf = float(p.dropout_p);
  for (int64_t r = 0; r < M.rows(); ++r)
    for_each_uniform(p.seed, p.offset, uint64_t((bh * Tq + i0 + r) * Tk), M.cols(),
                     [&](int64_t j0, const float* u, int64_t m) {
                       for (int64_t k = 0; k < m; ++k) M(r, j0 + k) = u[k] >= pf ? M(r, j0 + k) * keep_scale : A(0);
                     });
}

// Runs f(bh, scratch) for every batch*head, spread over the threads, each with its own scratch.
template <class A, class F>
void for_each_head(int64_t BH, F f) {
#pragma omp parallel
  {
    Scratch<A> scratch;
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < BH; ++bh) f(bh, scratch);
  }
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Out& out, const Out& lse,
               const AttentionParams& p) {
  const void* mask_data = mask.defined() ? mask.raw_data() : nullptr;
  const int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2);
  dispatch_floating(q.dtype(), "attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    for_each_head<A>(BH, [&](int64_t bh, Scratch<A>& sc) {
      const Tile<A> K = rows(sc, kK, ptr<T>(k) + bh * Tk * D, 0, Tk, D),
                    V = rows(sc, kV, ptr<T>(v) + bh * Tk * D, 0, Tk, D);
      A* L = ptr<A>(lse) + bh * Tq;
      for (int64_t i0 = 0; i0 < Tq; i0 += kBlockRows) {
        const int64_t n = std::min(kBlockRows, Tq - i0), kn = visible_keys(p, i0, n, Tk);
        Tile<A> S = scores<A, T>(sc, rows(sc, kQ, ptr<T>(q) + bh * Tq * D, i0, n, D), K, bh, i0, kn, p, mask_data);
        for (int64_t r = 0; r < n; ++r) {  // softmax in place, one exp per score, and its log-sum-exp
          A* row = S.data() + r * kn;
          const A m = kn ? S.row(r).maxCoeff() : -std::numeric_limits<A>::infinity();
          L[i0 + r] = m;
          if (std::isinf(m)) {  // no visible key
            std::fill(row, row + kn, A(0));
            continue;
          }
          A sum = 0;
          for (int64_t j = 0; j < kn; ++j) sum += (row[j] = exp_v(row[j] - m));
          for (int64_t j = 0; j < kn; ++j) row[j] /= sum;
          L[i0 + r] = m + std::log(sum);
        }
        apply_dropout(S, bh, i0, Tq, Tk, p);
        store_rows(product(sc, kOut, false, S, false, V, n, kn, D), ptr<T>(out) + bh * Tq * D, i0);
      }
    });
  });
}

void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        const Tensor& out, const Tensor& lse, const Out& delta, const Out& grad_q, const Out& grad_k,
                        const Out& grad_v, const AttentionParams& p) {
  const void* mask_data = mask.defined() ? mask.raw_data() : nullptr;
  const int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2);
  dispatch_floating(q.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    for_each_head<A>(BH, [&](int64_t bh, Scratch<A>& sc) {
      const int64_t qo = bh * Tq * D, ko = bh * Tk * D;
      const Tile<A> K = rows(sc, kK, ptr<T>(k) + ko, 0, Tk, D), V = rows(sc, kV, ptr<T>(v) + ko, 0, Tk, D);
      Tile<A> dK = sc.get(kDK, Tk, D), dV = sc.get(kDV, Tk, D);
      dK.setZero();
      dV.setZero();
      const A* L = ptr<A>(lse) + bh * Tq;
      A* Dl = ptr<A>(delta) + bh * Tq;
      for (int64_t i0 = 0; i0 < Tq; i0 += kBlockRows) {
        const int64_t n = std::min(kBlockRows, Tq - i0), kn = visible_keys(p, i0, n, Tk);
        const Tile<A> Q = rows(sc, kQ, ptr<T>(q) + qo, i0, n, D), dO = rows(sc, kDO, ptr<T>(grad_out) + qo, i0, n, D);
        const Tile<A> O = rows(sc, kO, ptr<T>(out) + qo, i0, n, D);
        for (int64_t r = 0; r < n; ++r) Dl[i0 + r] = dO.row(r).cwiseProduct(O.row(r)).sum();
        Tile<A> P = scores<A, T>(sc, Q, K, bh, i0, kn, p, mask_data);
        probabilities(P, L + i0);
        if (p.dropout_p > 0) {  // the dropped-out probabilities multiplied v
          Tile<A> Pd = sc.get(kPd, n, kn);
          Pd = P;
          apply_dropout(Pd, bh, i0, Tq, Tk, p);
          add_product(dV, true, Pd, dO, kn, n);
        } else {
          add_product(dV, true, P, dO, kn, n);
        }
        Tile<A> dS = product(sc, kDS, false, dO, true, V, n, D, kn);  // dP, then dS = P (dP - delta) scale in place
        apply_dropout(dS, bh, i0, Tq, Tk, p);
        const A scale = A(p.scale);
        for (int64_t r = 0; r < n; ++r) {
          const A d = Dl[i0 + r];
          A* s = dS.data() + r * kn;
          const A* pr = P.data() + r * kn;
          for (int64_t j = 0; j < kn; ++j) s[j] = pr[j] * (s[j] - d) * scale;
        }
        store_rows(product(sc, kOut, false, dS, false, K, n, kn, D), ptr<T>(grad_q) + qo, i0);
        add_product(dK, true, dS, Q, kn, n);
      }
      store_rows(dK, ptr<T>(grad_k) + ko, 0);
      store_rows(dV, ptr<T>(grad_v) + ko, 0);
    });
  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS
