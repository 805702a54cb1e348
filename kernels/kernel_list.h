// The kernel list: every entry of the Backend table and every fact about a kernel, written once.
// Each includer defines the macros it needs and includes this file, which undefines them again:
//   MG_KERNEL(name, return type, parameters...)           an entry every backend implements
//   MG_OPTIONAL_KERNEL(name, return type, parameters...)  an entry a backend may leave null
//   MG_SCRATCH(name)   the kernel allocates scratch: each backend also defines
//                      std::vector<Tensor> name_scratch(the same parameters), which allocates exactly
//                      that scratch and returns what the kernel computes on; the kernel calls it
//                      first, and a run on meta calls the one of the device a plan is for
//   MG_FLOPS(name, f)  the kernel's FLOPs as f(its arguments) (2 per multiply-add, as FlopCounter
//                      counts): the budget runtime's price of running it again (others cost 0)
// A tensor the kernel writes is a `const Out&` parameter (an output, a gradient, an in-place
// destination; the tensors of a list parameter are all taken as written): that is how the budget
// runtime knows which storages a run makes. backend.h declares the table from this file, each
// backend declares and registers its functions from it, and missing_kernels() checks it by name.
// Tensors arrive with their final shapes (broadcast inputs are expanded views with zero strides)
// and arbitrary strides unless a comment says otherwise. No include guard on purpose.
#ifndef MG_OPTIONAL_KERNEL
#define MG_OPTIONAL_KERNEL MG_KERNEL
#endif
#ifndef MG_SCRATCH
#define MG_SCRATCH(name)
#endif
#ifndef MG_FLOPS
#define MG_FLOPS(name, f)
#endif

// ---- elementwise (cpu/elementwise.cpp, cuda/elementwise.cu)
// dst[i] = convert(src[i]); src is expanded to dst's shape. src's strides may be negative (flip
// reads a reversed view).
MG_KERNEL(copy, void, const Tensor& src, const Out& dst)
MG_KERNEL(fill, void, const Out& dst, double value)
// dst[i] = start + i * step, in row-major order of a contiguous dst.
MG_KERNEL(fill_range, void, const Out& dst, double start, double step)
// Counter-based random fills: element i uses counter offset + i of generator `seed`.
MG_KERNEL(uniform, void, const Out& dst, uint64_t seed, uint64_t offset, double lo, double hi)
MG_KERNEL(normal, void, const Out& dst, uint64_t seed, uint64_t offset, double mean, double std)
MG_KERNEL(randint, void, const Out& dst, uint64_t seed, uint64_t offset, int64_t lo, int64_t hi)
MG_KERNEL(unary, void, UnaryOp op, const Tensor& x, const Out& out, UnaryParams p)
// grad_in = grad * d op(x)/dx, where `saved` is x, or the output for Exp/Tanh/Sigmoid/Sqrt/Rsqrt.
MG_KERNEL(unary_backward, void, UnaryOp op, const Tensor& grad, const Tensor& saved, const Out& grad_in, UnaryParams p)
// out = a op (alpha * b) for Add/Sub, a op b otherwise; comparisons write bool.
MG_KERNEL(binary, void, BinaryOp op, const Tensor& a, const Tensor& b, const Out& out, double alpha)
// GELU with the bias add before it fused: out = gelu(x + bias), grad_in = grad * gelu'(x + bias);
// bias is expanded to x's shape; `tanh` picks the tanh approximation over the erf form.
MG_KERNEL(bias_gelu, void, const Tensor& x, const Tensor& bias, const Out& out, bool tanh)
MG_KERNEL(bias_gelu_backward, void, const Tensor& grad, const Tensor& x, const Tensor& bias, const Out& grad_in,
          bool tanh)
MG_KERNEL(where, void, const Tensor& cond, const Tensor& a, const Tensor& b, const Out& out)
// out = x * keep / (1 - p), keep drawn from the counter-based generator.
MG_KERNEL(dropout, void, const Tensor& x, const Out& out, double p, uint64_t seed, uint64_t offset)
// out = residual + dropout(x + bias) on contiguous x, residual, out [rows, n] and bias [n], rounding
// to the storage type where the composed ops store: p = 0 keeps all, p = 1 multiplies by 0, else the
// dropout kernel's draws (element i: counter offset + i).
MG_KERNEL(bias_dropout_add, void, const Tensor& x, const Tensor& bias, const Tensor& residual, const Out& out, double p,
          uint64_t seed, uint64_t offset)

// ---- reductions and scans (cpu/reduce.cpp, cuda/reduce.cu)
// Reduces the contiguous x of shape [outer, r, inner] over r into out [outer, inner]. LogSumExp
// (floating x) is max + log(sum(exp(x - max))), -inf for a line of -inf.
MG_KERNEL(reduce, void, ReduceOp op, const Tensor& x, const Out& out, int64_t outer, int64_t r, int64_t inner)
// Inclusive scan (cumulative sum or product) along r of the contiguous x [outer, r, inner] into the
// contiguous out of the same shape, in out's dtype (int64 for integer and bool x).
MG_KERNEL(scan, void, ScanOp op, const Tensor& x, const Out& out, int64_t outer, int64_t r, int64_t inner)
// grad_in = the gradient of out = cumprod(x) along r for upstream grad (zeros in x included); all
// contiguous [outer, r, inner] of one floating dtype.
MG_KERNEL(cumprod_backward, void, const Tensor& grad, const Tensor& x, const Tensor& out, const Out& grad_in,
          int64_t outer, int64_t r, int64_t inner)
// Same layout; writes the max/min value and its index (int64) along r.
MG_KERNEL(arg_reduce, void, ReduceOp op, const Tensor& x, const Out& values, const Out& indices, int64_t outer,
          int64_t r, int64_t inner)

// ---- softmax (cpu/softmax.cpp, cuda/softmax.cu): contiguous x/out of shape [outer, r, inner], along r
MG_KERNEL(softmax, void, const Tensor& x, const Out& out, int64_t outer, int64_t r, int64_t inner, bool log)
MG_KERNEL(softmax_backward, void, const Tensor& grad, const Tensor& out, const Out& grad_in, int64_t outer, int64_t r,
          int64_t inner, bool log)
// out = softmax(scale * x + mask) over the rows of the contiguous x/out [BH, Tq, Tk] (scale * x
// rounded to the storage type, then masked as the composed ops do): `mask` is the data of a bool or
// additive mask described by m (m.kind None: undefined), causal hides key j > query i.
MG_KERNEL(scaled_masked_softmax, void, const Tensor& x, const Tensor& mask, const Out& out, double scale, bool causal,
          const AttentionMask& m)

// ---- losses (cpu/loss.cpp, cuda/loss.cu)
// logits contiguous [N, C], target int64 [N], weight contiguous [C] of the logits' dtype or
// undefined (all 1); loss float [N]: (1 - s) w[t] (-log p_t) + s / C sum_c w_c (-log p_c) with
// s the label smoothing, 0 for ignored rows (PyTorch's definition).
MG_KERNEL(cross_entropy, void, const Tensor& logits, const Tensor& target, const Tensor& weight, const Out& loss,
          int64_t ignore_index, double smoothing)
// grad_logits = grad_loss[n] * d loss[n] / d logits[n]; zero rows for ignored targets.
MG_KERNEL(cross_entropy_backward, void, const Tensor& grad_loss, const Tensor& logits, const Tensor& target,
          const Tensor& weight, const Out& grad_logits, int64_t ignore_index, double smoothing)

// ---- normalization (cpu/norm.cpp, cuda/norm.cu)
// Rows of the contiguous x [rows, n]; mean and rstd are [rows] of float32 (float64 for float64 x);
// weight/bias may be undefined.
MG_KERNEL(layer_norm, void, const Tensor& x, const Tensor& weight, const Tensor& bias, const Out& out, const Out& mean,
          const Out& rstd, double eps)
// sum = x + residual (rounded to the storage type), then layer_norm of sum; all contiguous [rows, n].
MG_KERNEL(add_layer_norm, void, const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
          const Out& sum, const Out& out, const Out& mean, const Out& rstd, double eps)
// Its scratch: none on the cpu; on cuda, float partial sums of grad_weight and grad_bias over slices
// of a tall input's rows (so that enough blocks run), added in order: deterministic.
MG_KERNEL(layer_norm_backward, void, const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
          const Tensor& weight, const Out& grad_x, const Out& grad_weight, const Out& grad_bias)
MG_SCRATCH(layer_norm_backward)
// RMS norm of the rows of the contiguous x [rows, n]: out = x * rstd * weight with rstd =
// 1 / sqrt(mean(x^2) + eps), [rows] of float32 (float64 for float64 x); weight may be undefined.
MG_KERNEL(rms_norm, void, const Tensor& x, const Tensor& weight, const Out& out, const Out& rstd, double eps)
// With xhat = x * rstd and gw = grad * weight: grad_x = rstd * (gw - xhat * mean(gw * xhat)) per row and
// grad_weight = sum(grad * xhat) over the rows (either may be undefined). Its scratch: layer_norm_backward's
// slices of the weight sums on tall inputs, on cuda.
MG_KERNEL(rms_norm_backward, void, const Tensor& grad, const Tensor& x, const Tensor& rstd, const Tensor& weight,
          const Out& grad_x, const Out& grad_weight)
MG_SCRATCH(rms_norm_backward)

// ---- sorting (cpu/sort.cpp, cuda/sort.cu)
// Sorts each line along r of the contiguous x [outer, r, inner] into values and int64 indices of
// the same layout, in kernels::sorts_before's order, ties in their original order (stable).
MG_KERNEL(sort, void, const Tensor& x, const Out& values, const Out& indices, int64_t outer, int64_t r, int64_t inner,
          bool descending)
// Batch norm per channel c of the contiguous x [N, C, S]; mean, var and rstd are [C], float32
// (float64 for float64 x); weight/bias [C] in x's dtype, may be undefined. training: mean and var
// (biased) of x[:, c, :] are computed and written, else read; rstd = 1 / sqrt(var + eps) is written;
// out = (x - mean) * rstd * weight + bias.
MG_KERNEL(batch_norm, void, const Tensor& x, const Tensor& weight, const Tensor& bias, const Out& out, const Out& mean,
          const Out& var, const Out& rstd, bool training, double eps)
// With xhat = (x - mean) * rstd: grad_weight = sum(grad * xhat) and grad_bias = sum(grad) over N and S
// (either may be undefined); grad_x = weight * rstd * (grad - mean(grad) - xhat * mean(grad * xhat))
// when the statistics were the batch's (training), else weight * rstd * grad.
MG_KERNEL(batch_norm_backward, void, const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
          const Tensor& weight, const Out& grad_x, const Out& grad_weight, const Out& grad_bias, bool training)

// ---- matmul (cpu/matmul.cpp, cuda/matmul.cu)
// Batched GEMM: out[b] = a[b] @ b[b]; a [B, M, K], b [B, K, N], out [B, M, N] contiguous. Its
// scratch: copies of the operands its library cannot read in place (and on the cpu, 16-bit
// products widened to float).
MG_KERNEL(matmul, void, const Tensor& a, const Tensor& b, const Out& out)
MG_SCRATCH(matmul)
MG_FLOPS(matmul, [](const Tensor& a, const Tensor&, const Tensor& out) {
  return 2.0 * double(out.numel()) * double(a.size(2));
})

// ---- attention (cpu/attention.cpp, cuda/attention.cu)
// Contiguous q [BH, Tq, D], k and v [BH, Tk, D] -> out [BH, Tq, D] and lse [BH, Tq], each row's
// log-sum-exp of the scaled, masked scores (-inf for a row with no key); lse and delta below
// are float32, float64 for float64 inputs. `mask` (undefined unless p.mask has a kind) is the
// mask's expanded view, read at p.mask's offsets.
MG_KERNEL(attention, void, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Out& out,
          const Out& lse, const AttentionParams& p)
// Gradients of q, k, v (same layouts) from grad_out and the forward's out and lse: the
// probabilities are recomputed tile by tile, never stored. delta ([BH, Tq]) is scratch
// for rowsum(grad_out * out), allocated by the op so every device books the same bytes.
MG_KERNEL(attention_backward, void, const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
          const Tensor& mask, const Tensor& out, const Tensor& lse, const Out& delta, const Out& grad_q,
          const Out& grad_k, const Out& grad_v, const AttentionParams& p)

// ---- indexing (cpu/index.cpp, cuda/index.cu)
// out = x.index_select(dim, index); index int64 1-d, checked in range.
MG_KERNEL(index_select, void, const Tensor& x, int64_t dim, const Tensor& index, const Out& out)
// dst.index_select(dim, index) += src (repeated indices add up).
MG_KERNEL(index_add, void, const Out& dst, int64_t dim, const Tensor& index, const Tensor& src)
// gather: out[p] = x at p with the dim coordinate replaced by index[p]; scatter and scatter_add
// write or add src[p] there in dst (index and src contiguous of one shape, dst any strides;
// which of repeated indices' writes wins in scatter is unspecified, as in PyTorch).
MG_KERNEL(gather, void, const Tensor& x, int64_t dim, const Tensor& index, const Out& out)
MG_KERNEL(scatter, void, const Out& dst, int64_t dim, const Tensor& index, const Tensor& src)
MG_KERNEL(scatter_add, void, const Out& dst, int64_t dim, const Tensor& index, const Tensor& src)

// ---- convolution lowering and pooling (cpu/conv.cpp, cuda/conv.cu)
// x [N, C, H, W] contiguous -> col [N, C*kh*kw, oh*ow]; col2im adds back into a zeroed x.
MG_KERNEL(im2col, void, const Tensor& x, const Out& col, const Conv2dGeometry& g)
MG_KERNEL(col2im, void, const Tensor& col, const Out& x, const Conv2dGeometry& g)
// Pooling on contiguous [N, C, H, W]; max pooling records flat argmax indices (int64) per output.
MG_KERNEL(max_pool2d, void, const Tensor& x, const Out& out, const Out& indices, const Conv2dGeometry& g)
MG_KERNEL(max_pool2d_backward, void, const Tensor& grad, const Tensor& indices, const Out& grad_x)
MG_KERNEL(avg_pool2d, void, const Tensor& x, const Out& out, const Conv2dGeometry& g)
MG_KERNEL(avg_pool2d_backward, void, const Tensor& grad, const Out& grad_x, const Conv2dGeometry& g)

// ---- direct convolution (cuda/cudnn.cu), for backends with a library for it: left null, or
// returning false (variant or configuration not supported), the op lowers to im2col + GEMM.
// x [N, C, H, W], weight [O, C/groups, kh, kw] and out [N, O, oh, ow], all contiguous; no bias.
MG_OPTIONAL_KERNEL(conv2d, bool, const Tensor& x, const Tensor& weight, const Out& out, const Conv2dGeometry& g,
                   int64_t groups)
// grad_x (zeroed by the callee as needed) from grad_out and weight; grad_weight from grad_out and x.
MG_OPTIONAL_KERNEL(conv2d_backward_input, bool, const Tensor& grad_out, const Tensor& weight, const Out& grad_x,
                   const Conv2dGeometry& g, int64_t groups)
MG_OPTIONAL_KERNEL(conv2d_backward_weight, bool, const Tensor& grad_out, const Tensor& x, const Out& grad_weight,
                   const Conv2dGeometry& g, int64_t groups)

// ---- multi-tensor ops (cpu/multi_tensor.cpp, cuda/multi_tensor.cu): optimizers and loss
// scaling. One call covers many tensors, which the CUDA backend updates in one fused launch per
// batch. The operands of tensor j (lists[k][j]) are contiguous and share its size and dtype; an
// optional operand may be undefined.
// One optimizer step, rules::sgd with scalars[j] on every element of tensor j.
// lists = {params, grads, momentum buffers (optional)}.
MG_KERNEL(sgd_update, void, const TensorLists& lists, const std::vector<rules::SGDScalars>& scalars)
// rules::adam; lists = {params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq (optional)}.
MG_KERNEL(adam_update, void, const TensorLists& lists, const std::vector<rules::AdamScalars>& scalars)
// rules::lion; lists = {params, grads, exp_avg}.
MG_KERNEL(lion_update, void, const TensorLists& lists, const std::vector<rules::LionScalars>& scalars)
// quant::Adam8bitScalars' update (kernels/quantize8bit.h); lists = {params, grads, exp_avg,
// exp_avg_sq, exp_avg absmax, exp_avg_sq absmax}: for a quantized tensor the moments are uint8 codes
// of the parameter's size and the absmax float32 [ceil(numel / 256)]; otherwise float32 moments of
// its size and undefined absmax. Params and grads share a floating dtype.
MG_KERNEL(adam8bit_update, void, const TensorLists& lists, const std::vector<quant::Adam8bitScalars>& scalars)
// adafactor::Scalars' step (kernels/adafactor.h); lists = {params, grads, row_var (the variance of a
// vector), col_var (undefined for a vector), exp_avg (optional)}, all of the parameter's dtype:
// row_var [..., R, 1] and col_var [..., 1, C] for a parameter [..., R, C].
// Its scratch: none on the cpu; on cuda one float64 buffer for the largest tensor's partial sums.
MG_KERNEL(adafactor_update, void, const TensorLists& lists, const std::vector<adafactor::Scalars>& scalars)
MG_SCRATCH(adafactor_update)
// Sets found_inf (float32 [1]) to 1 when an element of the contiguous floating tensors is inf or
// NaN (never clears it); unless inv_scale == 1, then multiplies them in place as t.mul_(inv_scale).
MG_KERNEL(non_finite_check_and_unscale, void, const std::vector<Tensor>& tensors, const Out& found_inf,
          double inv_scale)

#undef MG_KERNEL
#undef MG_OPTIONAL_KERNEL
#undef MG_SCRATCH
#undef MG_FLOPS
