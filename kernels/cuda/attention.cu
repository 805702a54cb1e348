// Fused attention, flash-attention style, in two variants: "simt" on CUDA cores (attention_simt.cuh's
// kernels, any floating dtype) and "mma", the default where it applies, float16/bfloat16 on tensor
// cores (attention_mma.cuh's); what both ask of a score (masks, dropout) is attention.cuh's.
#include <memgrad/core/variants_impl.h>
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/attention.cuh>
#include <memgrad/kernels/cuda/attention_mma.cuh>
#include <memgrad/kernels/cuda/attention_simt.cuh>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

namespace {

using namespace simt;

// Launches `kernel` with `smem` bytes of dynamic shared memory, opting in above the 48 KiB default.
template <class Kernel, class... Args>
void launch(const char* op, Kernel kernel, int64_t blocks, int threads, size_t smem, cudaStream_t s, Args... args) {
  if (blocks == 0) return;
  if (smem > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    MG_CHECK(e == cudaSuccess, DeviceError, op, ": ", smem,
             " bytes of shared memory unavailable: ", cudaGetErrorString(e));
  }
  MG_CHECK(blocks < (int64_t(1) << 31), NotImplementedError, op, ": ", blocks, " blocks exceed the grid limit");
  kernel<<<unsigned(blocks), threads, smem, s>>>(args...);
  check_launch(op);
}

void check_head_dim(const char* op, int64_t D) {
  MG_CHECK(D >= 1 && D <= kMaxHead, NotImplementedError, op, ": the cuda kernels take head dims 1 to ", kMaxHead,
           ", got ", D);
}

enum class Attention { Mma, Simt };
const KernelVariant<Attention> kAttention(DeviceType::CUDA, "attention",
                                          {{Attention::Mma, "mma"}, {Attention::Simt, "simt"}});

// Whether the "mma" variant takes this call: selected, a 16-bit dtype, a head dim it handles, 4-byte
// aligned rows (its 32-bit loads and stores), and its kernels built for sm_80+ (mma.sync): a build
// for older architectures only has PTX that traps there, whatever device runs it.
template <class T>
bool use_mma(const Tensor& q, std::initializer_list<const Tensor*> operands) {
  const int64_t D = q.size(2);
  if (kAttention != Attention::Mma || D % 16 != 0 || D > kMaxHead) return false;
  static const bool built_for_mma = [] {  // asked once per dtype, not on every call
    cudaFuncAttributes a{};
    if (cudaFuncGetAttributes(&a, mma::forward_kernel<T, 64>) == cudaSuccess) return a.ptxVersion >= 80;
    (void)cudaGetLastError();  // no image for this device: else the simt launch's check would report it
    return false;
  }();
  if (!built_for_mma) return false;
  for (const Tensor* t : operands)
    if (!aligned(dptr<char>(*t), 4)) return false;
  return true;
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Out& out, const Out& lse,
               const AttentionParams& p) {
  const int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2);
  check_head_dim("attention", D);
  cudaStream_t s = stream_for(out);
  dispatch_floating(q.dtype(), "attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      if (use_mma<T>(q, {&q, &k, &v, &out})) {
        using mma::u16;
        const int64_t blocks = (Tq + mma::kRows - 1) / mma::kRows;
        auto kernel = D <= 64 ? mma::forward_kernel<T, 64> : mma::forward_kernel<T, 128>;
        return launch("attention", kernel, BH * blocks, 128, mma::smem_bytes(3, D), s, dptr<u16>(q), dptr<u16>(k),
                      dptr<u16>(v), dptr_or_null<const char>(mask), dptr<u16>(out), dptr<float>(lse), Tq, Tk, int(D),
                      blocks, p);
      }
    }
    const int64_t row_blocks = (Tq + kWarps * kForwardRows - 1) / (kWarps * kForwardRows);
    launch("attention", attention_forward_kernel<T, A, kForwardRows>, BH * row_blocks, 32 * kWarps,
           forward_smem<A>(int(D)), s, dptr<T>(q), dptr<T>(k), dptr<T>(v), dptr_or_null<const char>(mask), dptr<T>(out),
           dptr<A>(lse), Tq, Tk, int(D), row_blocks, p);
  });
}

void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        const Tensor& out, const Tensor& lse, const Out& delta, const Out& grad_q, const Out& grad_k,
                        const Out& grad_v, const AttentionParams& p) {
  const int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2);
  check_head_dim("attention_backward", D);
  cudaStream_t s = stream_for(grad_q);
  dispatch_floating(q.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const T *go = dptr<T>(grad_out), *qp = dptr<T>(q), *kp = dptr<T>(k), *vp = dptr<T>(v);
    const A *lp = dptr<A>(lse), *dp = dptr<A>(delta);
    const void* mp = dptr_or_null<const char>(mask);
    launch("attention_backward", attention_delta_kernel<T, A>, grid_for(BH * Tq * 32), 256, 0, s, go, dptr<T>(out),
           dptr<A>(delta), BH * Tq, int(D));
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      if (use_mma<T>(q, {&grad_out, &q, &k, &v, &grad_q, &grad_k, &grad_v})) {
        using mma::u16;
        const u16 *go16 = dptr<u16>(grad_out), *q16 = dptr<u16>(q), *k16 = dptr<u16>(k), *v16 = dptr<u16>(v);
        const int64_t row_blocks = (Tq + mma::kRows - 1) / mma::kRows, key_blocks = (Tk + mma::kRows - 1) / mma::kRows;
        auto grad_q_kernel = D <= 64 ? mma::grad_q_kernel<T, 64> : mma::grad_q_kernel<T, 128>;
        launch("attention_backward", grad_q_kernel, BH * row_blocks, 128, mma::smem_bytes(4, D), s, go16, q16, k16, v16,
               mp, lp, dp, dptr<u16>(grad_q), Tq, Tk, int(D), row_blocks, p);
        auto grad_kv_kernel = D <= 64 ? mma::grad_kv_kernel<T, 64> : mma::grad_kv_kernel<T, 128>;
        launch("attention_backward", grad_kv_kernel, BH * key_blocks, 128,
               mma::smem_bytes(4, D) + 2 * mma::kTile * sizeof(float), s, go16, q16, k16, v16, mp, lp, dp,
               dptr<u16>(grad_k), dptr<u16>(grad_v), Tq, Tk, int(D), key_blocks, p);
        return;
      }
    }
    const int64_t row_blocks = (Tq + kWarps * kGradRows - 1) / (kWarps * kGradRows);
    launch("attention_backward", attention_grad_q_kernel<T, A, kGradRows>, BH * row_blocks, 32 * kWarps,
           grad_q_smem<A>(int(D)), s, go, qp, kp, vp, mp, lp, dp, dptr<T>(grad_q), Tq, Tk, int(D), row_blocks, p);
    const int64_t key_blocks = (Tk + kWarps * kGradKeys - 1) / (kWarps * kGradKeys);
    launch("attention_backward", attention_grad_kv_kernel<T, A, kGradKeys>, BH * key_blocks, 32 * kWarps,
           grad_kv_smem<A>(int(D)), s, go, qp, kp, vp, mp, lp, dp, dptr<T>(grad_k), dptr<T>(grad_v), Tq, Tk, int(D),
           key_blocks, p);
  });
}

}  // namespace mg::cuda
