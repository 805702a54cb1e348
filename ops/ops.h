// Every op's entry point. Each checks shapes, dtypes and devices, allocates its output through
// the ledger, runs the device's kernel (none on meta) and records its backward rule.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include <memgrad/core/random.h>
#include <memgrad/core/tensor.h>

namespace mg {

// ---- factories (category Input unless a MemoryScope says otherwise)
Tensor empty(const Shape& shape, const TensorOptions& o = {});
Tensor zeros(const Shape& shape, const TensorOptions& o = {});
Tensor ones(const Shape& shape, const TensorOptions& o = {});
Tensor full(const Shape& shape, const Scalar& value, const TensorOptions& o = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
// Without options the dtype follows torch.arange: int64 when every argument is an integer, else float32.
Tensor arange(const Scalar& end);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1);
Tensor arange(const Scalar& end, const TensorOptions& o);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& o);
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& o = {});
Tensor eye(int64_t n, const TensorOptions& o = {});
// Random factories draw from `generator`, or from the default generator when it is null (core/random.h).
Tensor rand(const Shape& shape, const TensorOptions& o = {}, Generator* generator = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, const TensorOptions& o = {}, Generator* generator = nullptr);  // N(0, 1)
Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& o = kInt64,
               Generator* generator = nullptr);
// Copies `data` into a new tensor of `shape`; without a shape, 1-d of data.size() (one value
// gives shape [1], as libtorch's torch::tensor). The dtype is the C++ type's (float32, float64,
// int32, int64, bool) unless the options say otherwise.
template <class T>
Tensor tensor(const std::vector<T>& data, const Shape& shape = {}, const TensorOptions& o = dtype_of<T>::value);
template <class T>
Tensor tensor(std::initializer_list<T> data, const TensorOptions& o = dtype_of<T>::value) {
  return tensor(std::vector<T>(data), {}, o);
}
// Rows of equal length: a 2-d tensor, tensor({{1.f, 2.f}, {3.f, 4.f}}).
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<T>> rows, const TensorOptions& o = dtype_of<T>::value) {
  std::vector<T> data;
  const int64_t n = int64_t(rows.size()), m = n ? int64_t(rows.begin()->size()) : 0;
  for (const auto& r : rows) {
    MG_CHECK(int64_t(r.size()) == m, ShapeError, "tensor: expected rows of ", m, " values, got one of ", r.size());
    data.insert(data.end(), r.begin(), r.end());
  }
  return tensor(data, {n, m}, o);
}
// One value: a 0-d tensor, as torch::tensor(3.5).
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
Tensor tensor(T value, const TensorOptions& o = dtype_of<T>::value) {
  return tensor(std::vector<T>{value}, {1}, o).view({});
}
Tensor scalar_tensor(const Scalar& v, const TensorOptions& o = {});
// from_blob (memory the caller owns, wrapped without a copy) is declared with Tensor (core/tensor.h).

// ---- elementwise, with broadcasting and PyTorch's type promotion
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor pow(const Tensor& a, const Scalar& exponent);
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApprox { None, Tanh };  // erf form, or the tanh approximation
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::None);
// gelu(x + bias) in one pass, bias [n] broadcast over x [..., n] (the bias add of the linear layer
// before a GELU, fused into it). Saves x and bias; their gradients come from one kernel.
Tensor bias_gelu(const Tensor& x, const Tensor& bias, GeluApprox approx = GeluApprox::None);
Tensor silu(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);

// Comparisons give bool tensors and no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);

// ---- reductions (all dims when `dims` is empty)
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance and standard deviation with Bessel's correction by default (divide by n - correction).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
// log(sum(exp(x))) over dims, computed from the max (no overflow); integers give float32.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// The extreme values over `dim` and their indices (int64), as libtorch's tuple: auto [v, i] = max(x, 1).
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums `x` down to `shape` (the inverse of broadcasting); used by backward rules.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- scans along a dim: the input converted to `dtype` first when given; integers and bool give int64
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// ---- sorting along a dim (values and int64 indices). NaN sorts after every number (before,
// descending); equal values keep their order (the sort is stable, as libtorch's stable = true).
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The k largest (smallest) values along dim and their indices, always in sorted order. Computed
// by a full sort whose buffers are freed on return; saves only the k indices for backward.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);

// ---- softmax family
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- linear algebra
Tensor matmul(const Tensor& a, const Tensor& b);  // batched and broadcasting, like torch.matmul
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());  // x W^T + b

// ---- shape and indexing
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// x with src[p] written (scatter) or added (scatter_add) at position p of index with its `dim`
// coordinate replaced by index[p]; index (int64) has x's number of dims and is no larger than src,
// nor than x outside dim. With repeated indices scatter keeps one of the writes (unspecified, as in
// PyTorch). In-place forms: Tensor::scatter_, scatter_add_.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// x with alpha * source's slice k along dim added to slice index[k] (1-d int64; repeats add up).
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha = 1);
// int64 [..., num_classes] with a 1 at each index; num_classes = -1 reads the largest index + 1
// (not on meta).
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);
// A copy with the order of elements along `dims` reversed.
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ---- neural-network ops
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Normalises each of num_groups groups of channels of input [N, C, ...] over the group's channels
// and positions, then scales and shifts per channel (weight and bias [C], optional).
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Root-mean-square normalization (Zhang & Sennrich 2019, LLaMA's RMSNorm) over the trailing
// normalized_shape dims of x: y = x / sqrt(mean(x^2) + eps) * weight, as torch.nn.functional.rms_norm
// with an explicit eps. weight (of shape normalized_shape) may be undefined. Saves x and the per-row
// 1/rms (float32; float64 for float64 x). Runs in float32 under autocast.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(), double eps = 1e-6);
// Batch normalization (Ioffe & Szegedy 2015) of x [N, C, ...] per channel of dim 1, as
// torch.nn.functional.batch_norm. training: normalizes with the batch's mean and biased variance
// over N and the trailing dims, and when running_mean / running_var ([C], both or neither) are given
// updates them in place: r = (1 - momentum) r + momentum b, with the unbiased variance. Else
// normalizes with the running statistics (required). weight and bias ([C]) may be undefined. Saves x
// and the per-channel mean and 1/std (float32; float64 for float64 x). Runs in float32 under autocast.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = true,
                  double momentum = 0.1, double eps = 1e-5);
// Zeroes elements with probability p and scales the rest by 1/(1-p). The mask is not stored:
// backward regenerates it from the counter-based generator's seed and offset.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* generator = nullptr);

// ---- fused element-wise chains of a transformer block (one pass each; the composed ops' values)
// softmax(scale * x + mask) over the last dim of x [..., Tq, Tk], with attn_mask and is_causal as
// scaled_dot_product_attention takes them: a bool mask (true: the query sees the key) or one of x's
// dtype (added), broadcast to x's shape; is_causal hides key j > query i. A row that sees no key is
// NaN, as the composed softmax gives. Saves only the output (the composed ops also keep scale * x
// and the masked scores alive while they run); an additive mask that requires grad gets one.
Tensor scaled_masked_softmax(const Tensor& x, double scale, const Tensor& attn_mask = {}, bool is_causal = false);
// (x + residual, layer_norm(x + residual)): the residual stream's sum and its normalization in one
// pass. x and residual have one shape and dtype; the rest as layer_norm. Saves the sum, mean and rstd.
std::tuple<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                          const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                                          double eps = 1e-5);
// residual + dropout(x + bias, p, training): the end of a linear layer in a residual block, in one
// pass. bias [x.size(-1)]; residual of x's shape. Draws from the generator exactly as
// dropout(x + bias) would (the same mask for the same generator state) and saves nothing.
Tensor bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, double p, bool training = true,
                        Generator* generator = nullptr);
enum class Reduction { None, Mean, Sum };
// softmax(scale * q k^T + mask) @ v over the last two dims, fused: no [Tq, Tk] matrix is stored.
// libtorch's argument order and defaults. q [..., Tq, D], k [..., Tk, D], v [..., Tk, D]; their
// leading dims broadcast (a broadcast operand is copied to the common shape for the kernels).
// attn_mask broadcasts to [..., Tq, Tk]: bool (true: the query may see the key) or of q's dtype
// (added to the scaled scores); a query that sees no key gets zeros. is_causal: query i sees keys
// j <= i (PyTorch's top-left alignment); not together with a mask. scale defaults to 1/sqrt(D).
// dropout_p drops probabilities with the mask the dropout op would draw on the [..., Tq, Tk]
// matrix for the same generator state, so fused and composed attention agree exactly. Saves q, k,
// v, the output, the mask (a view of it) and each row's log-sum-exp (float32 [..., Tq]; float64 for
// float64 inputs); backward recomputes the rest. An additive mask that requires grad takes the
// composed path instead, which keeps the probabilities.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = {},
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);
// No implicit conversions into dropout_p and is_causal: a bool dropout_p or a non-bool is_causal
// (the old order, sdpa(q, k, v, is_causal, dropout_p), or 0.1 meant as dropout_p) does not compile.
template <class P, std::enable_if_t<std::is_same_v<P, bool>, int> = 0>
Tensor scaled_dot_product_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, P) = delete;
template <class C, std::enable_if_t<!std::is_same_v<C, bool>, int> = 0>
Tensor scaled_dot_product_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, C,
                                    std::optional<double> = std::nullopt) = delete;
// logits [N, C] or [N, C, d...] (or [C] with a 0-d target); target int64 [N] or [N, d...] of
// class indices. With class weights [C] (libtorch's at::cross_entropy_loss order), each target's
// loss is scaled by its class's weight and the mean divides by the weights of the targets that are
// not ignored; label smoothing spreads s / C over the classes, weighted too (PyTorch's definition).
// Fused with the softmax: the [N, C] probabilities are not stored.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                     Reduction reduction = Reduction::Mean, int64_t ignore_index = -100, double label_smoothing = 0.0);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::Mean);
// The negative log-likelihood of log-probabilities input [N, C] or [N, C, d...] (or [C] with a 0-d
// target): -weight[t] * input[n, t], 0 for ignored targets; the mean divides by the weights of the
// targets that are not ignored. libtorch's at::nll_loss argument order.
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// input [N, C, H, W], weight [O, C/groups, kH, kW]
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
              std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
Tensor max_pool2d(const Tensor& input, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0});
Tensor avg_pool2d(const Tensor& input, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0});

// ---- operators
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
inline Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Scalar& a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Scalar& a, const Tensor& b) { return mul(pow(b, -1.0), a); }
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }

// ---- comparisons of whole tensors (for tests and checks)
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and values

extern template Tensor tensor<float>(const std::vector<float>&, const Shape&, const TensorOptions&);
extern template Tensor tensor<double>(const std::vector<double>&, const Shape&, const TensorOptions&);
extern template Tensor tensor<int32_t>(const std::vector<int32_t>&, const Shape&, const TensorOptions&);
extern template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&, const TensorOptions&);
extern template Tensor tensor<bool>(const std::vector<bool>&, const Shape&, const TensorOptions&);

}  // namespace mg
