// What both fused-attention variants (attention.cu's "simt", attention_mma.cuh's "mma") ask of a
// score: whether the query sees the key (range, causality, a bool mask), what an additive mask adds,
// and the dropout mask's scale. Device code only, so the host emulation of tests/cuda reads it too.
#pragma once
#include <memgrad/kernels/backend.h>
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda {

constexpr unsigned kFull = 0xffffffffu;  // every lane of a warp

// 1 / (1 - p) where dropout keeps probability (bh, i, j), else 0; 1 without dropout.
template <class A>
__device__ __forceinline__ A keep_scale(const AttentionParams& p, int64_t bh, int64_t i, int64_t j, int64_t Tq,
                                        int64_t Tk) {
  if (p.dropout_p == 0) return A(1);
  const uint64_t n = uint64_t((bh * Tq + i) * Tk + j);
  return random_uniform(p.seed, p.offset, n) >= float(p.dropout_p) ? A(1.0 / (1.0 - p.dropout_p)) : A(0);
}

__device__ __forceinline__ bool sees(const AttentionParams& p, int64_t i, int64_t j, int64_t Tk) {
  return j < Tk && (!p.causal || j <= i);
}

// Head bh's part of the mask (its element (0, 0)), or null without one: the divisions of
// AttentionMask::head_offset once per head, not per score. `mask` holds T for additive masks.
template <class T>
__device__ __forceinline__ const void* head_mask(const AttentionParams& p, const void* mask, int64_t bh) {
  using Kind = AttentionMask::Kind;
  if (p.mask.kind == Kind::None) return nullptr;
  const int64_t off = p.mask.head_offset(bh);
  if (p.mask.kind == Kind::Bool) return static_cast<const bool*>(mask) + off;
  return static_cast<const T*>(mask) + off;
}

// Whether query i sees key j (in range, causal, a bool mask), and in `add` what an additive mask adds
// to its score. `mask` is the query's head's (head_mask).
template <class T, class A>
__device__ __forceinline__ bool visible(const AttentionParams& p, const void* mask, int64_t i, int64_t j, int64_t Tk,
                                        A* add) {
  *add = A(0);
  if (!sees(p, i, j, Tk)) return false;
  using Kind = AttentionMask::Kind;
  if (p.mask.kind == Kind::None) return true;
  const int64_t off = i * p.mask.stride_q + j * p.mask.stride_k;
  if (p.mask.kind == Kind::Bool) return static_cast<const bool*>(mask)[off];
  *add = A(dload(static_cast<const T*>(mask)[off]));
  return true;
}

}  // namespace mg::cuda
