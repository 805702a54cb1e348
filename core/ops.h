// Every op's entry point. Each checks shapes, dtypes and devices, allocates its output through
// the ledger, runs the device's kernel (none on meta) and records its backward rule.
#pragma once
#include <cstdint>
#include <optional>
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
// Copies `data` into a new tensor of `shape` (a 1-d shape of data.size() when empty).
template <class T>
Tensor tensor(const std::vector<T>& data, const Shape& shape = {}, const TensorOptions& o = dtype_of<T>::value);
Tensor scalar_tensor(const Scalar& v, const TensorOptions& o = {});
// Wraps memory the caller owns, without copying; `deleter` runs when the last view dies.
Tensor from_blob(void* data, const Shape& shape, const TensorOptions& o = {}, std::function<void(void*)> deleter = {});

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
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
struct ValuesIndices {
  Tensor values, indices;
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums `x` down to `shape` (the inverse of broadcasting); used by backward rules.
Tensor sum_to(const Tensor& x, const Shape& shape);

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
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ---- neural-network ops
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
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
enum class Reduction { None, Mean, Sum };
// softmax(scale * q k^T) @ v over the last two dims, fused: no [Tq, Tk] matrix is stored.
// q [..., Tq, D], k and v [..., Tk, D] with equal leading dims; scale <= 0 means 1/sqrt(D).
// is_causal: query i sees keys j <= i (PyTorch's top-left alignment). dropout_p drops
// probabilities with the mask the dropout op would draw on the [..., Tq, Tk] matrix for the
// same generator state, so fused and composed attention agree exactly. Saves q, k, v, the
// output and each row's log-sum-exp (float32 [..., Tq]; float64 for float64 inputs); backward
// recomputes the rest.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = false,
                                    double dropout_p = 0.0, double scale = 0.0);
// logits [N, C] or [N, C, d...]; target int64 [N] or [N, d...] of class indices.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::Mean);
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
