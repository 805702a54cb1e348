// The "mma" attention kernels (kernels/cuda/attention_mma.cuh), run on the host by emulated_device.h
// with mma.sync taken from the PTX ISA's fragment layouts, against attention in float64 on the same
// 16-bit inputs: forward (out, lse) and backward (dq, dk, dv), head dims 32, 48, 80 and 128 (both kDMax
// instantiations, the 32-row dk/dv tile included), causal or not, Tq != Tk, partial tiles, masks
// and dropout. A fragment layout off by one register must fail the same comparison.
#include <doctest/doctest.h>

#include "emulated_device.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/attention_mma.cuh>

#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {
using namespace mg;
using namespace mg::cuda;
using mma::u16;

struct Case {
  int BH, Tq, Tk, D;
  bool causal, bf16;
  AttentionMask::Kind mask = AttentionMask::Kind::None;
  double dropout = 0;
};

u16 to16(float v, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}
double from16(u16 v, bool bf16) {
  return bf16 ? double(__bfloat162float(__ushort_as_bfloat16(v))) : double(__half2float(__ushort_as_half(v)));
}

struct Tensor16 {
  std::vector<u16> bits;
  std::vector<double> value;  // what the bits hold
};
Tensor16 random16(size_t n, bool bf16, std::mt19937& rng, double scale = 1) {
  std::normal_distribution<float> dist(0.f, float(scale));
  Tensor16 t{std::vector<u16>(n), std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i) {
    t.bits[i] = to16(dist(rng), bf16);
    t.value[i] = from16(t.bits[i], bf16);
  }
  return t;
}

struct Result {
  std::vector<double> out, lse, dq, dk, dv;
};

// Attention in float64, straight from the definitions (the kernels' conventions: a row that sees no
// key has lse -inf and output 0; dropout keeps (bh, i, j) by the same counter as the kernels).
Result reference(const Case& c, const AttentionParams& p, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, const std::vector<double>& dout, const std::vector<unsigned char>& bmask,
                 const std::vector<double>& amask) {
  const int Tq = c.Tq, Tk = c.Tk, D = c.D;
  Result r{std::vector<double>(size_t(c.BH) * Tq * D), std::vector<double>(size_t(c.BH) * Tq),
           std::vector<double>(size_t(c.BH) * Tq * D), std::vector<double>(size_t(c.BH) * Tk * D),
           std::vector<double>(size_t(c.BH) * Tk * D)};
  for (int bh = 0; bh < c.BH; ++bh)
    for (int i = 0; i < Tq; ++i) {
      std::vector<double> s(size_t(Tk), -INFINITY), prob(size_t(Tk), 0), keep(size_t(Tk), 1);
      double m = -INFINITY;
      for (int j = 0; j < Tk; ++j) {
        if (c.causal && j > i) continue;
        const int64_t at = p.mask.offset(bh, i, j);
        if (c.mask == AttentionMask::Kind::Bool && !bmask[size_t(at)]) continue;
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += q[(size_t(bh) * Tq + i) * D + d] * k[(size_t(bh) * Tk + j) * D + d];
        s[size_t(j)] = p.scale * dot + (c.mask == AttentionMask::Kind::Additive ? amask[size_t(at)] : 0.0);
        m = std::max(m, s[size_t(j)]);
        if (c.dropout > 0) {
          const uint64_t n = (uint64_t(bh) * Tq + i) * Tk + j;
          keep[size_t(j)] = kernels::random_uniform(p.seed, p.offset, n) >= float(c.dropout) ? 1 / (1 - c.dropout) : 0;
        }
      }
      double l = 0;
      for (int j = 0; j < Tk; ++j) l += s[size_t(j)] == -INFINITY ? 0 : std::exp(s[size_t(j)] - m);
      r.lse[size_t(bh) * Tq + i] = l > 0 ? m + std::log(l) : -INFINITY;
      for (int j = 0; j < Tk; ++j)
        prob[size_t(j)] = l > 0 && s[size_t(j)] != -INFINITY ? std::exp(s[size_t(j)] - m) / l : 0;
      double delta = 0;
      for (int d = 0; d < D; ++d) {
        double o = 0;
        for (int j = 0; j < Tk; ++j) o += prob[size_t(j)] * keep[size_t(j)] * v[(size_t(bh) * Tk + j) * D + d];
        r.out[(size_t(bh) * Tq + i) * D + d] = o;
        delta += o * dout[(size_t(bh) * Tq + i) * D + d];
      }
      for (int j = 0; j < Tk; ++j) {
        if (prob[size_t(j)] == 0) continue;
        double dp = 0;
        for (int d = 0; d < D; ++d) dp += dout[(size_t(bh) * Tq + i) * D + d] * v[(size_t(bh) * Tk + j) * D + d];
        const double ds = prob[size_t(j)] * (dp * keep[size_t(j)] - delta) * p.scale;
        for (int d = 0; d < D; ++d) {
          r.dq[(size_t(bh) * Tq + i) * D + d] += ds * k[(size_t(bh) * Tk + j) * D + d];
          r.dk[(size_t(bh) * Tk + j) * D + d] += ds * q[(size_t(bh) * Tq + i) * D + d];
          r.dv[(size_t(bh) * Tk + j) * D + d] +=
              prob[size_t(j)] * keep[size_t(j)] * dout[(size_t(bh) * Tq + i) * D + d];
        }
      }
    }
  return r;
}

template <class T, int kDMax>
Result run_emulated(const Case& c, const AttentionParams& p, const Tensor16& q, const Tensor16& k, const Tensor16& v,
                    const Tensor16& dout, const std::vector<unsigned char>& bmask, const std::vector<u16>& amask) {
  const int Tq = c.Tq, Tk = c.Tk, D = c.D;
  const emu::Buffer<u16> dq_in("q", q.bits), dk_in("k", k.bits), dv_in("v", v.bits), ddo("grad_out", dout.bits);
  const emu::Buffer<unsigned char> dbmask("bool mask", bmask);
  const emu::Buffer<u16> damask("additive mask", amask);
  const void* mask = c.mask == AttentionMask::Kind::Bool       ? static_cast<const void*>(dbmask.data())
                     : c.mask == AttentionMask::Kind::Additive ? damask.data()
                                                               : nullptr;
  emu::Buffer<u16> dout_("out", size_t(c.BH) * Tq * D), dq("grad_q", size_t(c.BH) * Tq * D);
  emu::Buffer<u16> dk("grad_k", size_t(c.BH) * Tk * D), dv("grad_v", size_t(c.BH) * Tk * D);
  emu::Buffer<float> lse("lse", size_t(c.BH) * Tq);
  const int64_t row_blocks = (Tq + mma::kRows - 1) / mma::kRows, key_blocks = (Tk + mma::kRows - 1) / mma::kRows;
  const dim3 block(128);
  emu::launch<mma::forward_kernel<T, kDMax>>({dim3(unsigned(c.BH * row_blocks)), block, mma::smem_bytes(3, D)},
                                             dq_in.data(), dk_in.data(), dv_in.data(), mask, dout_.data(), lse.data(),
                                             int64_t(Tq), int64_t(Tk), D, row_blocks, p);
  const std::vector<u16> out = dout_.to_vector();
  std::vector<float> delta(size_t(c.BH) * Tq);
  for (size_t row = 0; row < delta.size(); ++row) {  // attention_delta_kernel: dO . out, on the stored out
    double s = 0;
    for (int d = 0; d < D; ++d) s += dout.value[row * D + d] * from16(out[row * D + d], c.bf16);
    delta[row] = float(s);
  }
  const emu::Buffer<float> ddelta("delta", delta);
  emu::launch<mma::grad_q_kernel<T, kDMax>>({dim3(unsigned(c.BH * row_blocks)), block, mma::smem_bytes(4, D)},
                                            ddo.data(), dq_in.data(), dk_in.data(), dv_in.data(), mask, lse.data(),
                                            ddelta.data(), dq.data(), int64_t(Tq), int64_t(Tk), D, row_blocks, p);
  emu::launch<mma::grad_kv_kernel<T, kDMax>>(
      {dim3(unsigned(c.BH * key_blocks)), block, mma::smem_bytes(4, D) + 2 * mma::kTile * sizeof(float)}, ddo.data(),
      dq_in.data(), dk_in.data(), dv_in.data(), mask, lse.data(), ddelta.data(), dk.data(), dv.data(), int64_t(Tq),
      int64_t(Tk), D, key_blocks, p);
  const std::vector<float> lse_v = lse.to_vector();
  auto widen = [&](const std::vector<u16>& x) {
    std::vector<double> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = from16(x[i], c.bf16);
    return r;
  };
  return {widen(out), std::vector<double>(lse_v.begin(), lse_v.end()), widen(dq.to_vector()), widen(dk.to_vector()),
          widen(dv.to_vector())};
}

// The largest error relative to the largest reference magnitude (-inf == -inf counts as exact).
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    err = std::max(err, std::isfinite(got[i]) ? std::abs(got[i] - want[i]) : INFINITY);
    if (std::isfinite(want[i])) scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

// Runs a case on the emulated kernels and the reference; the worst relative error over the five outputs.
double worst_error(const Case& c, unsigned seed, bool report = true) {
  std::mt19937 rng(seed);
  const size_t nq = size_t(c.BH) * c.Tq * c.D, nk = size_t(c.BH) * c.Tk * c.D;
  const Tensor16 q = random16(nq, c.bf16, rng), k = random16(nk, c.bf16, rng), v = random16(nk, c.bf16, rng),
                 dout = random16(nq, c.bf16, rng);
  AttentionParams p;
  p.scale = 1 / std::sqrt(double(c.D));
  p.causal = c.causal;
  p.dropout_p = c.dropout;
  p.seed = 1234;
  p.offset = 40;  // not a multiple of 4: draws straddle Philox blocks
  p.mask.kind = c.mask;
  std::vector<unsigned char> bmask;
  Tensor16 amask;
  if (c.mask != AttentionMask::Kind::None) {  // one [Tq, Tk] mask per head: the head's offset is taken once
    p.mask.nd = 1;
    p.mask.size[0] = c.BH;
    p.mask.stride[0] = int64_t(c.Tq) * c.Tk;
    p.mask.stride_q = c.Tk;
    p.mask.stride_k = 1;
    const size_t n = size_t(c.BH) * c.Tq * c.Tk;
    if (c.mask == AttentionMask::Kind::Bool) {
      std::bernoulli_distribution see(0.8);
      for (size_t i = 0; i < n; ++i) bmask.push_back(see(rng));
    } else {
      amask = random16(n, c.bf16, rng);
    }
  }
  const Result want = reference(c, p, q.value, k.value, v.value, dout.value, bmask, amask.value);
  Result got;
  if (c.bf16)
    got = c.D <= 64 ? run_emulated<BFloat16, 64>(c, p, q, k, v, dout, bmask, amask.bits)
                    : run_emulated<BFloat16, 128>(c, p, q, k, v, dout, bmask, amask.bits);
  else
    got = c.D <= 64 ? run_emulated<Half, 64>(c, p, q, k, v, dout, bmask, amask.bits)
                    : run_emulated<Half, 128>(c, p, q, k, v, dout, bmask, amask.bits);
  const double errors[] = {relative_error(got.out, want.out), relative_error(got.lse, want.lse),
                           relative_error(got.dq, want.dq), relative_error(got.dk, want.dk),
                           relative_error(got.dv, want.dv)};
  if (report) {
    std::ostringstream m;
    m << "D=" << c.D << " Tq=" << c.Tq << " Tk=" << c.Tk << (c.causal ? " causal" : "") << (c.bf16 ? " bf16" : " fp16")
      << " mask=" << int(c.mask) << " dropout=" << c.dropout << ": relative errors out " << errors[0] << ", lse "
      << errors[1] << ", dq " << errors[2] << ", dk " << errors[3] << ", dv " << errors[4];
    MESSAGE(m.str());
  }
  return *std::max_element(std::begin(errors), std::end(errors));
}

// Rounding to 16 bits (inputs, probabilities before p v, outputs) bounds what the kernels can reach.
double tolerance(bool bf16) { return bf16 ? 1.5e-2 : 2e-3; }

}  // namespace

TEST_CASE("mma attention emulated on the host: forward and backward match float64") {
  const Case cases[] = {
      {2, 70, 45, 32, false, false},                                  // Tq > Tk, partial tiles
      {2, 45, 130, 32, true, true},                                   // Tq < Tk, three key tiles
      {1, 100, 100, 48, true, false},                                 // kDMax 64, D not a power of 2
      {2, 64, 64, 48, false, true, AttentionMask::Kind::Bool},        // whole tiles, a bool mask per head
      {1, 77, 90, 80, true, false, AttentionMask::Kind::Additive},    // kDMax 128: 32-row dk/dv tiles
      {2, 33, 70, 80, false, true, AttentionMask::Kind::None, 0.25},  // dropout
      {1, 130, 66, 32, true, true, AttentionMask::Kind::None, 0.1},   // causal with Tq > Tk, dropout
      {1, 64, 70, 128, true, true},                                   // the largest head dim
  };
  unsigned seed = 1;
  for (const Case& c : cases) CHECK(worst_error(c, seed++) < tolerance(c.bf16));
}

TEST_CASE("mma attention emulated on the host: a wrong fragment layout is caught") {
  const Case c{1, 40, 70, 48, true, false};
  REQUIRE(worst_error(c, 7, false) < tolerance(false));
  for (emu::Mutation m : {emu::Mutation::ARegisters, emu::Mutation::BRows, emu::Mutation::CRows}) {
    emu::set_mutation(m);
    const double err = worst_error(c, 7, false);
    emu::set_mutation(emu::Mutation::None);
    MESSAGE("mutation " << int(m) << ": worst relative error " << err);
    CHECK(err > 10 * tolerance(false));
  }
}
