// The kernel interface every device backend fills in. Ops check arguments and allocate outputs;
// kernels only compute. Tensors arrive with their final shapes (broadcast inputs are expanded
// views with zero strides) and arbitrary strides unless a comment says otherwise.
#pragma once
#include <cstdint>
#include <vector>

#include <memgrad/autograd/grad_mode.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/tensor.h>
#include <memgrad/kernels/host_device.h>
#include <memgrad/optim/update_rules.h>

namespace mg::kernels {

enum class UnaryOp : uint8_t {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Abs,
  Tanh,
  Sigmoid,
  Relu,
  GeluErf,
  GeluTanh,
  Silu,
  PowScalar,   // x ^ a
  Clamp,       // clamp(x, a, b)
  AddScalar,   // x + a
  MulScalar,   // x * a
  RsubScalar,  // a - x
};
// Scalar parameters of a unary op (exponent, clamp bounds, ...).
struct UnaryParams {
  double a = 0, b = 0;
};
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Pow, Max, Min, Eq, Ne, Lt, Le, Gt, Ge };
enum class ReduceOp : uint8_t { Sum, Max, Min };

struct Conv2dGeometry {
  int64_t n, c, h, w;      // input
  int64_t kh, kw, oh, ow;  // kernel and output size
  int64_t sh, sw, ph, pw, dh, dw;
};

// PyTorch's avg_pool2d divisor with count_include_pad: the window clipped to the padded image.
MG_HD int64_t avg_pool_area(const Conv2dGeometry& g, int64_t oy, int64_t ox) {
  int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
  int64_t y1 = y0 + g.kh < g.h + g.ph ? y0 + g.kh : g.h + g.ph, x1 = x0 + g.kw < g.w + g.pw ? x0 + g.kw : g.w + g.pw;
  return (y1 - y0) * (x1 - x0);
}

// Scaled dot-product attention: softmax(scale * q k^T, causal mask) -> dropout -> @ v, with no
// [Tq, Tk] matrix kept. Query i sees keys j <= i when causal (PyTorch's is_causal). Dropout keeps
// probability (bh, i, j) when draw offset + (bh * Tq + i) * Tk + j is >= p, the same mask the
// dropout op draws on the contiguous [BH, Tq, Tk] probabilities.
struct AttentionParams {
  double scale = 1;
  bool causal = false;
  double dropout_p = 0;
  uint64_t seed = 0, offset = 0;
};

// Operands of a multi-tensor op: lists[k][j] is operand k of tensor j.
using TensorLists = std::vector<std::vector<Tensor>>;

// A contiguous shape seen as [outer, size along dim, inner] (the layout of the index kernels).
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
inline DimSplit split_at(const Shape& s, int64_t dim) {
  DimSplit r;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) (d < dim ? r.outer : d == dim ? r.size : r.inner) *= s[d];
  return r;
}

struct Backend {
  // dst[i] = convert(src[i]); src is expanded to dst's shape.
  void (*copy)(const Tensor& src, const Tensor& dst) = nullptr;
  void (*fill)(const Tensor& dst, double value) = nullptr;
  // dst[i] = start + i * step, in row-major order of a contiguous dst.
  void (*fill_range)(const Tensor& dst, double start, double step) = nullptr;
  // Counter-based random fills: element i uses counter offset + i of generator `seed`.
  void (*uniform)(const Tensor& dst, uint64_t seed, uint64_t offset, double lo, double hi) = nullptr;
  void (*normal)(const Tensor& dst, uint64_t seed, uint64_t offset, double mean, double std) = nullptr;
  void (*randint)(const Tensor& dst, uint64_t seed, uint64_t offset, int64_t lo, int64_t hi) = nullptr;

  void (*unary)(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p) = nullptr;
  // grad_in = grad * d op(x)/dx, where `saved` is x, or the output for Exp/Tanh/Sigmoid/Sqrt/Rsqrt.
  void (*unary_backward)(UnaryOp op, const Tensor& grad, const Tensor& saved, const Tensor& grad_in,
                         UnaryParams p) = nullptr;
  // out = a op (alpha * b) for Add/Sub, a op b otherwise; comparisons write bool.
  void (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) = nullptr;
  // GELU with the bias add before it fused: out = gelu(x + bias), grad_in = grad * gelu'(x + bias);
  // bias is expanded to x's shape; `tanh` picks the tanh approximation over the erf form.
  void (*bias_gelu)(const Tensor& x, const Tensor& bias, const Tensor& out, bool tanh) = nullptr;
  void (*bias_gelu_backward)(const Tensor& grad, const Tensor& x, const Tensor& bias, const Tensor& grad_in,
                             bool tanh) = nullptr;
  void (*where)(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = nullptr;

  // Reduces the contiguous x of shape [outer, r, inner] over r into out [outer, inner].
  void (*reduce)(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner) = nullptr;
  // Same layout; writes the max/min value and its index (int64) along r.
  void (*arg_reduce)(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer,
                     int64_t r, int64_t inner) = nullptr;

  // Contiguous x/out of shape [outer, r, inner], along r.
  void (*softmax)(const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner, bool log) = nullptr;
  void (*softmax_backward)(const Tensor& grad, const Tensor& out, const Tensor& grad_in, int64_t outer, int64_t r,
                           int64_t inner, bool log) = nullptr;

  // Batched GEMM: out[b] = a[b] @ b[b]; a [B, M, K], b [B, K, N], out [B, M, N] contiguous.
  void (*matmul)(const Tensor& a, const Tensor& b, const Tensor& out) = nullptr;

  // out = x.index_select(dim, index); index int64 1-d, checked in range.
  void (*index_select)(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = nullptr;
  // dst.index_select(dim, index) += src (repeated indices add up).
  void (*index_add)(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src) = nullptr;
  void (*gather)(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = nullptr;
  void (*scatter_add)(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src) = nullptr;

  // Rows of the contiguous x [rows, n]; mean and rstd are float32 [rows]; weight/bias may be undefined.
  void (*layer_norm)(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
                     const Tensor& rstd, double eps) = nullptr;
  void (*layer_norm_backward)(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                              const Tensor& grad_bias) = nullptr;
  // out = x * keep / (1 - p), keep drawn from the counter-based generator.
  void (*dropout)(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t offset) = nullptr;
  // logits contiguous [N, C], target int64 [N]; loss float [N] (0 for ignored rows).
  void (*cross_entropy)(const Tensor& logits, const Tensor& target, const Tensor& loss, int64_t ignore_index,
                        double smoothing) = nullptr;
  // grad_logits = grad_loss[n] * (softmax - smoothed one-hot); zero rows for ignored targets.
  void (*cross_entropy_backward)(const Tensor& grad_loss, const Tensor& logits, const Tensor& target,
                                 const Tensor& grad_logits, int64_t ignore_index, double smoothing) = nullptr;

  // x [N, C, H, W] contiguous -> col [N, C*kh*kw, oh*ow]; col2im adds back into a zeroed x.
  void (*im2col)(const Tensor& x, const Tensor& col, const Conv2dGeometry& g) = nullptr;
  void (*col2im)(const Tensor& col, const Tensor& x, const Conv2dGeometry& g) = nullptr;
  // Pooling on contiguous [N, C, H, W]; max pooling records flat argmax indices (int64) per output.
  void (*max_pool2d)(const Tensor& x, const Tensor& out, const Tensor& indices, const Conv2dGeometry& g) = nullptr;
  void (*max_pool2d_backward)(const Tensor& grad, const Tensor& indices, const Tensor& grad_x) = nullptr;
  void (*avg_pool2d)(const Tensor& x, const Tensor& out, const Conv2dGeometry& g) = nullptr;
  void (*avg_pool2d_backward)(const Tensor& grad, const Tensor& grad_x, const Conv2dGeometry& g) = nullptr;

  // Contiguous q [BH, Tq, D], k and v [BH, Tk, D] -> out [BH, Tq, D] and lse [BH, Tq], each row's
  // log-sum-exp of the scaled, masked scores (-inf for a row with no key); lse and delta below
  // are float32, float64 for float64 inputs.
  void (*attention)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                    const AttentionParams& p) = nullptr;
  // Gradients of q, k, v (same layouts) from grad_out and the forward's out and lse: the
  // probabilities are recomputed tile by tile, never stored. delta ([BH, Tq]) is scratch
  // for rowsum(grad_out * out), allocated by the op so every device books the same bytes.
  void (*attention_backward)(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& delta, const Tensor& grad_q,
                             const Tensor& grad_k, const Tensor& grad_v, const AttentionParams& p) = nullptr;

  // Direct convolution, for backends with a library for it (cuDNN); left null, or returning false
  // (variant or configuration not supported), the op lowers to im2col + GEMM. x [N, C, H, W],
  // weight [O, C/groups, kh, kw] and out [N, O, oh, ow], all contiguous; no bias.
  bool (*conv2d)(const Tensor& x, const Tensor& weight, const Tensor& out, const Conv2dGeometry& g,
                 int64_t groups) = nullptr;
  // grad_x (zeroed by the callee as needed) from grad_out and weight; grad_weight from grad_out and x.
  bool (*conv2d_backward_input)(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x,
                                const Conv2dGeometry& g, int64_t groups) = nullptr;
  bool (*conv2d_backward_weight)(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight,
                                 const Conv2dGeometry& g, int64_t groups) = nullptr;

  // Multi-tensor ops (optimizers, loss scaling): one call covers many tensors, which the CUDA
  // backend updates in one fused launch per batch. The operands of tensor j (lists[k][j]) are
  // contiguous and share its size and dtype; an optional operand may be undefined.
  // One optimizer step, optim::rules::sgd with scalars[j] on every element of tensor j.
  // lists = {params, grads, momentum buffers (optional)}.
  void (*sgd_update)(const TensorLists& lists, const std::vector<optim::rules::SGDScalars>& scalars) = nullptr;
  // optim::rules::adam; lists = {params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq (optional)}.
  void (*adam_update)(const TensorLists& lists, const std::vector<optim::rules::AdamScalars>& scalars) = nullptr;
  // Sets found_inf (float32 [1]) to 1 when an element of the contiguous floating tensors is inf or
  // NaN (never clears it); unless inv_scale == 1, then multiplies them in place as t.mul_(inv_scale).
  void (*non_finite_check_and_unscale)(const std::vector<Tensor>& tensors, const Tensor& found_inf,
                                       double inv_scale) = nullptr;
};

const Backend& cpu_backend();
const Backend& cuda_backend();  // entries stay null until the CUDA backend provides them

// Runs `fn` of the backend for `device` (nothing on meta). Raises NotImplementedError naming
// `op` when the backend lacks the kernel.
template <class Fn, class... Args>
void run(const char* op, const Device& device, Fn Backend::*fn, Args&&... args) {
  if (device.is_meta()) return;
  NoGradGuard no_grad;                       // kernels never record history
  MemoryScope scratch(Category::Workspace);  // anything a kernel allocates is scratch
  const Backend& b = device.is_cuda() ? cuda_backend() : cpu_backend();
  auto f = b.*fn;
  MG_CHECK(f != nullptr, NotImplementedError, op, ": no kernel for device ", device, " yet");
  f(std::forward<Args>(args)...);
}

// Runs an optional entry (one returning bool, such as conv2d): false when the backend has none,
// declines, or `device` is meta, and the caller takes its general path.
template <class Fn, class... Args>
bool try_run(const Device& device, Fn Backend::*fn, Args&&... args) {
  if (device.is_meta()) return false;
  NoGradGuard no_grad;
  MemoryScope scratch(Category::Workspace);
  auto f = (device.is_cuda() ? cuda_backend() : cpu_backend()).*fn;
  return f != nullptr && f(std::forward<Args>(args)...);
}

}  // namespace mg::kernels
