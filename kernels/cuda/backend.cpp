// The CUDA kernel table. Without MG_CUDA it stays empty and ops on cuda tensors raise
// (allocation already says why: not built / no device).
#include <memgrad/kernels/backend.h>
#ifdef MG_WITH_CUDA
#include <memgrad/kernels/cuda/cuda_kernels.h>
#endif

namespace mg::kernels {

const Backend& cuda_backend() {
  static const Backend b = [] {
    Backend k;
#ifdef MG_WITH_CUDA
    k.copy = cuda::copy;
    k.fill = cuda::fill;
    k.fill_range = cuda::fill_range;
    k.uniform = cuda::uniform;
    k.normal = cuda::normal;
    k.randint = cuda::randint;
    k.unary = cuda::unary;
    k.unary_backward = cuda::unary_backward;
    k.binary = cuda::binary;
    k.bias_gelu = cuda::bias_gelu;
    k.bias_gelu_backward = cuda::bias_gelu_backward;
    k.where = cuda::where;
    k.reduce = cuda::reduce;
    k.arg_reduce = cuda::arg_reduce;
    k.softmax = cuda::softmax;
    k.softmax_backward = cuda::softmax_backward;
    k.matmul = cuda::matmul;
    k.attention = cuda::attention;
    k.attention_backward = cuda::attention_backward;
    k.conv2d = cuda::conv2d;
    k.conv2d_backward_input = cuda::conv2d_backward_input;
    k.conv2d_backward_weight = cuda::conv2d_backward_weight;
    k.index_select = cuda::index_select;
    k.index_add = cuda::index_add;
    k.gather = cuda::gather;
    k.scatter_add = cuda::scatter_add;
    k.layer_norm = cuda::layer_norm;
    k.layer_norm_backward = cuda::layer_norm_backward;
    k.dropout = cuda::dropout;
    k.cross_entropy = cuda::cross_entropy;
    k.cross_entropy_backward = cuda::cross_entropy_backward;
    k.im2col = cuda::im2col;
    k.col2im = cuda::col2im;
    k.max_pool2d = cuda::max_pool2d;
    k.max_pool2d_backward = cuda::max_pool2d_backward;
    k.avg_pool2d = cuda::avg_pool2d;
    k.avg_pool2d_backward = cuda::avg_pool2d_backward;
    k.sgd_update = cuda::sgd_update;
    k.adam_update = cuda::adam_update;
    k.non_finite_check_and_unscale = cuda::non_finite_check_and_unscale;
#endif
    return k;
  }();
  return b;
}

}  // namespace mg::kernels
