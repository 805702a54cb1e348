#include <memgrad/kernels/cpu/cpu_kernels.h>

namespace mg::kernels {

const Backend& cpu_backend() {
  static const Backend b = [] {
    Backend k;
    k.copy = cpu::copy;
    k.fill = cpu::fill;
    k.fill_range = cpu::fill_range;
    k.uniform = cpu::uniform;
    k.normal = cpu::normal;
    k.randint = cpu::randint;
    k.unary = cpu::unary;
    k.unary_backward = cpu::unary_backward;
    k.binary = cpu::binary;
    k.bias_gelu = cpu::bias_gelu;
    k.bias_gelu_backward = cpu::bias_gelu_backward;
    k.where = cpu::where;
    k.reduce = cpu::reduce;
    k.arg_reduce = cpu::arg_reduce;
    k.softmax = cpu::softmax;
    k.softmax_backward = cpu::softmax_backward;
    k.matmul = cpu::matmul;
    k.attention = cpu::attention;
    k.attention_backward = cpu::attention_backward;
    k.index_select = cpu::index_select;
    k.index_add = cpu::index_add;
    k.gather = cpu::gather;
    k.scatter_add = cpu::scatter_add;
    k.layer_norm = cpu::layer_norm;
    k.layer_norm_backward = cpu::layer_norm_backward;
    k.dropout = cpu::dropout;
    k.cross_entropy = cpu::cross_entropy;
    k.cross_entropy_backward = cpu::cross_entropy_backward;
    k.im2col = cpu::im2col;
    k.col2im = cpu::col2im;
    k.max_pool2d = cpu::max_pool2d;
    k.max_pool2d_backward = cpu::max_pool2d_backward;
    k.avg_pool2d = cpu::avg_pool2d;
    k.avg_pool2d_backward = cpu::avg_pool2d_backward;
    k.sgd_update = cpu::sgd_update;
    k.adam_update = cpu::adam_update;
    k.non_finite_check_and_unscale = cpu::non_finite_check_and_unscale;
    return k;
  }();
  return b;
}

}  // namespace mg::kernels
