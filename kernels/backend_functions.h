// The kernel functions every backend implements, one per Backend entry (see backend.h for
// their contracts). Included inside a backend's namespace (mg::cpu, mg::cuda), so each backend
// declares the same list once: no include guard on purpose.
// elementwise
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& dst, double value);
void fill_range(const Tensor& dst, double start, double step);
void uniform(const Tensor& dst, uint64_t seed, uint64_t offset, double lo, double hi);
void normal(const Tensor& dst, uint64_t seed, uint64_t offset, double mean, double std);
void randint(const Tensor& dst, uint64_t seed, uint64_t offset, int64_t lo, int64_t hi);
void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p);
void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& saved, const Tensor& grad_in, UnaryParams p);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha);
void bias_gelu(const Tensor& x, const Tensor& bias, const Tensor& out, bool tanh);
void bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias, const Tensor& grad_in, bool tanh);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t offset);

// reductions, softmax, cross-entropy, layer norm
void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner);
void arg_reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer, int64_t r,
                int64_t inner);
void softmax(const Tensor& x, const Tensor& out, int64_t outer, int64_t r, int64_t inner, bool log);
void softmax_backward(const Tensor& grad, const Tensor& out, const Tensor& grad_in, int64_t outer, int64_t r,
                      int64_t inner, bool log);
void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& loss, int64_t ignore_index,
                   double smoothing);
void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target,
                            const Tensor& grad_logits, int64_t ignore_index, double smoothing);
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
                const Tensor& rstd, double eps);
void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias);

// attention
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
               const AttentionParams& p);
void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& delta, const Tensor& grad_q, const Tensor& grad_k,
                        const Tensor& grad_v, const AttentionParams& p);

// matmul
void matmul(const Tensor& a, const Tensor& b, const Tensor& out);

// indexing
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
void index_add(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src);
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
void scatter_add(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src);

// convolution lowering and pooling
void im2col(const Tensor& x, const Tensor& col, const Conv2dGeometry& g);
void col2im(const Tensor& col, const Tensor& x, const Conv2dGeometry& g);
void max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices, const Conv2dGeometry& g);
void max_pool2d_backward(const Tensor& grad, const Tensor& indices, const Tensor& grad_x);
void avg_pool2d(const Tensor& x, const Tensor& out, const Conv2dGeometry& g);
void avg_pool2d_backward(const Tensor& grad, const Tensor& grad_x, const Conv2dGeometry& g);

// multi-tensor: optimizer updates, loss-scale unscaling
void sgd_update(const TensorLists& lists, const std::vector<optim::rules::SGDScalars>& scalars);
void adam_update(const TensorLists& lists, const std::vector<optim::rules::AdamScalars>& scalars);
void non_finite_check_and_unscale(const std::vector<Tensor>& tensors, const Tensor& found_inf, double inv_scale);
