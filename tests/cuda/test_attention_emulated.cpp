// The "simt" attention kernels (kernels/cuda/attention_simt.cuh) emulated on the host against the CPU
// backend's fused attention: forward (out, lse) and backward (delta, dq, dk, dv), every floating
// dtype, head dims from 1 to 128 (odd ones included), Tq != Tk with partial tiles, causal or not,
// bool and additive masks broadcast over heads, dropout, and queries that see no key.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/attention_simt.cuh>

#include <memgrad/ops/op_util.h>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda::simt;
using emu::cpu;

struct Case {
  int64_t BH, Tq, Tk, D;
  bool causal;
  AttentionMask::Kind mask = AttentionMask::Kind::None;
  double dropout = 0;
};

void check_case(const Case& c, DType t) {
  CAPTURE(c.Tq);
  CAPTURE(c.Tk);
  CAPTURE(c.D);
  CAPTURE(emu::name_of(t));
  const DType at = t == kFloat64 ? kFloat64 : kFloat32;
  const Tensor q = emu::uniform({c.BH, c.Tq, c.D}, t, -1, 1, 1), k = emu::uniform({c.BH, c.Tk, c.D}, t, -1, 1, 2);
  const Tensor v = emu::uniform({c.BH, c.Tk, c.D}, t, -1, 1, 3), go = emu::uniform({c.BH, c.Tq, c.D}, t, -1, 1, 4);
  AttentionParams p;
  p.scale = 1 / std::sqrt(double(c.D));
  p.causal = c.causal;
  p.dropout_p = c.dropout, p.seed = 7, p.offset = 42;
  Tensor mask;
  if (c.mask != AttentionMask::Kind::None) {  // one [Tq, Tk] mask for every head; query 1 sees nothing
    const bool is_bool = c.mask == AttentionMask::Kind::Bool;
    Tensor base = is_bool ? emu::ints({c.Tq, c.Tk}, kBool, 0, 2, 5) : emu::uniform({c.Tq, c.Tk}, t, -2, 1, 5);
    if (is_bool && c.Tq > 1) base.select(0, 1).fill_(false);
    mask = base.expand({c.BH, c.Tq, c.Tk});
    p.mask = detail::describe_mask(mask, is_bool);
  }
  const Shape qs{c.BH, c.Tq, c.D}, ks{c.BH, c.Tk, c.D}, rows{c.BH, c.Tq};
  const Tensor out = empty(qs, t), lse = empty(rows, at), delta = empty(rows, at);
  const Tensor gq = empty(qs, t), gk = empty(ks, t), gv = empty(ks, t);
  cpu(&Backend::attention, q, k, v, mask, Out(out), Out(lse), p);
  cpu(&Backend::attention_backward, go, q, k, v, mask, out, lse, Out(delta), Out(gq), Out(gk), Out(gv), p);
  const Tensor got_out = empty(qs, t), got_lse = empty(rows, at), got_delta = empty(rows, at);
  const Tensor got_gq = empty(qs, t), got_gk = empty(ks, t), got_gv = empty(ks, t);
  dispatch_floating(t, "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const int D = int(c.D);
    const emu::DeviceTensor dq("q", q), dk("k", k), dv("v", v), dgo("grad_out", go), dm("mask", mask);
    const emu::DeviceTensor dout = emu::DeviceTensor::output("out", got_out),
                            dlse = emu::DeviceTensor::output("lse", got_lse);
    const emu::DeviceTensor ddelta = emu::DeviceTensor::output("delta", got_delta);
    const emu::DeviceTensor dgq = emu::DeviceTensor::output("grad_q", got_gq);
    const emu::DeviceTensor dgk = emu::DeviceTensor::output("grad_k", got_gk),
                            dgv = emu::DeviceTensor::output("grad_v", got_gv);
    const dim3 block(32 * kWarps);
    const int64_t row_blocks = (c.Tq + kWarps * kForwardRows - 1) / (kWarps * kForwardRows);
    emu::launch<attention_forward_kernel<T, A, kForwardRows>>(
        {dim3(unsigned(c.BH * row_blocks)), block, forward_smem<A>(D)}, dq.ptr<T>(), dk.ptr<T>(), dv.ptr<T>(),
        dm.ptr<char>(), dout.ptr<T>(), dlse.ptr<A>(), c.Tq, c.Tk, D, row_blocks, p);
    emu::launch<attention_delta_kernel<T, A>>({dim3(3), dim3(64)}, dgo.ptr<T>(), dout.ptr<T>(), ddelta.ptr<A>(),
                                              c.BH * c.Tq, D);
    const int64_t grad_blocks = (c.Tq + kWarps * kGradRows - 1) / (kWarps * kGradRows);
    emu::launch<attention_grad_q_kernel<T, A, kGradRows>>(
        {dim3(unsigned(c.BH * grad_blocks)), block, grad_q_smem<A>(D)}, dgo.ptr<T>(), dq.ptr<T>(), dk.ptr<T>(),
        dv.ptr<T>(), dm.ptr<char>(), dlse.ptr<A>(), ddelta.ptr<A>(), dgq.ptr<T>(), c.Tq, c.Tk, D, grad_blocks, p);
    const int64_t key_blocks = (c.Tk + kWarps * kGradKeys - 1) / (kWarps * kGradKeys);
    if (key_blocks > 0)  // attention.cu launches no empty grid
      emu::launch<attention_grad_kv_kernel<T, A, kGradKeys>>(
          {dim3(unsigned(c.BH * key_blocks)), block, grad_kv_smem<A>(D)}, dgo.ptr<T>(), dq.ptr<T>(), dk.ptr<T>(),
          dv.ptr<T>(), dm.ptr<char>(), dlse.ptr<A>(), ddelta.ptr<A>(), dgk.ptr<T>(), dgv.ptr<T>(), c.Tq, c.Tk, D,
          key_blocks, p);
    for (const emu::DeviceTensor* d : {&dout, &dlse, &ddelta, &dgq, &dgk, &dgv}) d->download();
  });
  const double tol = emu::rtol_for(t, 4 * std::sqrt(double(std::max(c.Tk, c.D))));
  emu::check_close(got_out, out, tol, tol, "attention out");
  emu::check_close(got_lse, lse, emu::rtol_for(at, 16), emu::rtol_for(at, 16), "attention lse");
  emu::check_close(got_delta, delta, tol, tol, "attention delta");
  emu::check_close(got_gq, gq, 4 * tol, 4 * tol, "attention grad_q");
  emu::check_close(got_gk, gk, 4 * tol, 4 * tol, "attention grad_k");
  emu::check_close(got_gv, gv, 4 * tol, 4 * tol, "attention grad_v");
}

}  // namespace

TEST_CASE("simt attention kernels: forward and backward against the cpu") {
  using Kind = AttentionMask::Kind;
  const Case cases[] = {
      {2, 17, 40, 31, false},                   // odd head dim, partial tiles
      {1, 33, 33, 64, true},                    // causal
      {2, 20, 45, 1, false, Kind::Bool},        // head dim 1; a query with no key
      {1, 9, 70, 128, true, Kind::Additive},    // the largest head dim
      {2, 40, 12, 33, false, Kind::None, 0.2},  // Tq > Tk, dropout
      {1, 5, 0, 16, false},                     // no keys at all
  };
  for (const Case& c : cases)
    for (DType t : emu::floating_dtypes()) check_case(c, t);
}
