// Convolution (cuDNN where a backend has it, else im2col + GEMM) and pooling.
#include <memgrad/core/autocast.h>
#include <memgrad/core/cuda.h>
#include <memgrad/core/flops.h>
#include <memgrad/ops/op_util.h>

namespace mg {

using namespace detail;
using kernels::Conv2dGeometry;

namespace {
std::vector<int64_t> pair_arg(const char* op, const char* what, std::vector<int64_t> v, int64_t min) {
  if (v.size() == 1) v.push_back(v[0]);
  MG_CHECK(v.size() == 2, ValueError, op, ": expected ", what, " as one or two numbers, got ", v.size());
  for (auto e : v) MG_CHECK(e >= min, ValueError, op, ": expected ", what, " >= ", min, ", got ", e);
  return v;
}

// im2col as an op: x [N, C, H, W] -> columns [N, G, C/G * kh * kw, oh * ow], booked as Workspace.
// It and fold2d (col2im into zeros) are each other's backward, so the lowered convolution's
// backward can be differentiated again.
Tensor fold2d(const Tensor& col, const Shape& x_shape, const Conv2dGeometry& g);
Tensor unfold2d(const Tensor& x, const Conv2dGeometry& g, int64_t groups) {
  Tensor col;
  {
    MemoryScope scratch(Category::Workspace);
    col = new_output({g.n, groups, g.c / groups * g.kh * g.kw, g.oh * g.ow}, x.dtype(), x.device());
    NoGradGuard ng;
    kernels::run(x.device(), &Backend::im2col, x.contiguous(), col, g);
  }
  Shape xs = x.shape();
  autograd::record(Op::conv2d, {x}, {col},
                   [xs, g](const TensorList& grads, const Node&) { return TensorList{fold2d(grads[0], xs, g)}; });
  return col;
}
Tensor fold2d(const Tensor& col, const Shape& x_shape, const Conv2dGeometry& g) {
  Tensor x = zeros_output(x_shape, col.dtype(), col.device());
  kernels::run(col.device(), &Backend::col2im, col.contiguous(), x, g);
  const int64_t groups = col.size(1);
  autograd::record(Op::conv2d, {col}, {x}, [g, groups](const TensorList& grads, const Node&) {
    return TensorList{unfold2d(grads[0], g, groups)};
  });
  return x;
}

Conv2dGeometry geometry(const char* op, const Tensor& x, int64_t kh, int64_t kw, const std::vector<int64_t>& st,
                        const std::vector<int64_t>& pad, const std::vector<int64_t>& dil) {
  MG_CHECK(x.dim() == 4, ShapeError, op, ": expected input [N, C, H, W], got ", shape_str(x.shape()));
  Conv2dGeometry g{x.size(0), x.size(1), x.size(2), x.size(3), kh,     kw,     0,
                   0,         st[0],     st[1],     pad[0],    pad[1], dil[0], dil[1]};
  // Output size (in + 2 pad - dil (k - 1) - 1) / stride + 1, checked: the padded input and the
  // dilated window may overflow, and a window wider than the padded input gives no output.
  auto out_size = [&](int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride) -> int64_t {
    auto padded = checked_mul(2, pad), window = checked_mul(dil, k - 1);
    if (padded) padded = checked_add(in, *padded);
    MG_CHECK(padded && window, ShapeError, op, ": input ", shape_str(x.shape()), " with padding ", pad, ", dilation ",
             dil, " and a ", k, "-wide window overflows int64");
    const int64_t span = *padded - *window - 1;
    return span < 0 ? 0 : span / stride + 1;
  };
  g.oh = out_size(g.h, g.ph, g.dh, kh, g.sh);
  g.ow = out_size(g.w, g.pw, g.dw, kw, g.sw);
  MG_CHECK(g.oh > 0 && g.ow > 0, ShapeError, op, ": input ", shape_str(x.shape()), " is too small for a ", kh, "x", kw,
           " window (output would be ", g.oh, "x", g.ow, ")");
  return g;
}
}  // namespace

Tensor conv2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  Tensor input = amp::cast_for_half_op(input_in), weight = amp::cast_for_half_op(weight_in),
         bias = amp::cast_for_half_op(bias_in);
  OpScope scope(Op::conv2d);
  check_floating("conv2d", input);
  check_same_device("conv2d", input, weight);
  MG_CHECK(input.dtype() == weight.dtype(), DTypeError, "conv2d: expected input and weight of one dtype, got ",
           input.dtype(), " and ", weight.dtype());
  MG_CHECK(weight.dim() == 4, ShapeError, "conv2d: expected weight [O, C/groups, kH, kW], got ",
           shape_str(weight.shape()));
  MG_CHECK(groups >= 1, ValueError, "conv2d: expected groups >= 1, got ", groups);
  stride = pair_arg("conv2d", "stride", stride, 1);
  padding = pair_arg("conv2d", "padding", padding, 0);
  dilation = pair_arg("conv2d", "dilation", dilation, 1);
  auto g = geometry("conv2d", input, weight.size(2), weight.size(3), stride, padding, dilation);
  const int64_t O = weight.size(0), G = groups;
  MG_CHECK(g.c % G == 0 && O % G == 0, ValueError, "conv2d: expected channels ", g.c, " and outputs ", O,
           " divisible by groups ", G);
  MG_CHECK(weight.size(1) * G == g.c, ShapeError, "conv2d: expected weight with ", g.c / G,
           " input channels per group for input ", shape_str(input.shape()), ", got ", shape_str(weight.shape()));
  if (bias.defined())
    MG_CHECK(bias.shape() == Shape{O}, ShapeError, "conv2d: expected a bias of shape [", O, "], got ",
             shape_str(bias.shape()));
  const int64_t K = numel_of({g.c / G, g.kh, g.kw}), L = numel_of({g.oh, g.ow});  // im2col's [K, L] per group
  const double flops = 2.0 * double(g.n) * double(O) * double(K) * double(L);
  Tensor out = new_output({g.n, O, g.oh, g.ow}, input.dtype(), input.device());
  // A direct convolution (cuDNN) is tried first on cuda unless the kernel variant is "im2col"; it
  // may decline (dtype, size), and cpu and meta never ask, so their ledger is exactly the lowering's.
  const bool direct = input.device().is_cuda() && cuda::kernel_variant("conv2d") == "cudnn";
  // Lower to GEMM: out[n, grp] = W[grp] @ im2col(x)[n, grp]; the columns are scratch.
  auto columns = [g, G](const Tensor& x) { return unfold2d(x, g, G); };
  {
    NoGradGuard ng;
    bool done = false;
    if (direct) {
      MemoryScope scratch(Category::Workspace);  // contiguous copies, if any, are scratch like the columns
      done = kernels::try_run(input.device(), &Backend::conv2d, input.contiguous(), weight.contiguous(), out, g, G);
    }
    if (!done) {
      Tensor col = columns(input);
      Tensor w = weight.contiguous().view({G, O / G, K});
      for (int64_t n = 0; n < g.n; ++n)
        kernels::run(input.device(), &Backend::matmul, w, col.select(0, n), out.select(0, n).view({G, O / G, L}));
    }
    if (bias.defined()) {
      Tensor o3 = out.view({g.n, O, L});
      kernels::run(input.device(), &Backend::binary, kernels::BinaryOp::Add, o3,
                   prepare(bias.view({O, 1}), input.dtype(), o3.shape()), o3, 1.0);
    }
  }
  count_flops(flops);
  if (autograd::any_requires_grad({input, weight, bias})) {
    SavedTensor sx(weight.requires_grad() ? input : Tensor()), sw(input.requires_grad() ? weight : Tensor());
    Shape xs = input.shape(), ws = weight.shape();
    autograd::record(Op::conv2d, {input, weight, bias}, {out}, [=](const TensorList& grads, const Node& node) {
      Tensor go = grads[0].contiguous().view({g.n, G, O / G, L}), gx, gw, gb;
      // The direct kernels write whole gradients (allocated first, dropped before the lowering
      // runs if declined) and count the FLOPs the lowering's matmuls would.
      auto direct_grad = [&](auto entry, const Shape& shape, const Tensor& operand) {
        if (!direct || autograd::creating_graph()) return Tensor();  // the lowering is differentiable
        Tensor grad = new_output(shape, go.dtype(), go.device());
        MemoryScope scratch(Category::Workspace);
        if (!kernels::try_run(go.device(), entry, go.view({g.n, O, g.oh, g.ow}), operand.contiguous(), grad, g, G))
          return Tensor();
        count_flops(flops);
        return grad;
      };
      if (node.needs_input_grad(0)) gx = direct_grad(&Backend::conv2d_backward_input, xs, sw.get());
      if (node.needs_input_grad(0) && !gx.defined()) {
        Tensor w = sw.get().reshape({G, O / G, K});
        gx = fold2d(matmul(w.transpose(1, 2), go), xs, g);  // the columns' gradient [N, G, K, L], folded
      }
      if (node.needs_input_grad(1)) gw = direct_grad(&Backend::conv2d_backward_weight, ws, sx.get());
      if (node.needs_input_grad(1) && !gw.defined()) {
        Tensor col = columns(sx.get());
        gw = sum(matmul(go, col.transpose(2, 3)), {0}).reshape(ws);  // [G, O/G, K] summed over N
      }
      if (node.needs_input_grad(2)) gb = sum(grads[0], {0, 2, 3});
      return TensorList{gx, gw, gb};
    });
  }
  return out;
}

namespace {
Tensor pool2d(Op id, bool is_max, const Tensor& input, std::vector<int64_t> kernel, std::vector<int64_t> stride,
              std::vector<int64_t> padding) {
  const char* op = op_name(id);
  OpScope scope(id);
  kernel = pair_arg(op, "kernel size", kernel, 1);
  stride = stride.empty() ? kernel : pair_arg(op, "stride", stride, 1);
  padding = pair_arg(op, "padding", padding, 0);
  MG_CHECK(padding[0] <= kernel[0] / 2 && padding[1] <= kernel[1] / 2, ValueError, op,
           ": expected padding at most half the kernel size, got padding ", padding[0], "x", padding[1], " for kernel ",
           kernel[0], "x", kernel[1]);
  auto g = geometry(op, input, kernel[0], kernel[1], stride, padding, {1, 1});
  Tensor x;
  {
    NoGradGuard ng;
    x = input.contiguous();
  }
  Tensor out = new_output({g.n, g.c, g.oh, g.ow}, input.dtype(), input.device());
  Tensor idx = is_max ? new_output(out.shape(), kInt64, input.device()) : Tensor();
  if (is_max)
    kernels::run(input.device(), &Backend::max_pool2d, x, out, idx, g);
  else
    kernels::run(input.device(), &Backend::avg_pool2d, x, out, g);
  SavedTensor si(is_max && autograd::any_requires_grad({input}) ? idx : Tensor());
  Shape xs = input.shape();
  autograd::record(id, {input}, {out}, [=](const TensorList& grads, const Node&) {
    Tensor go = grads[0].contiguous(), gx = zeros_output(xs, go.dtype(), go.device());
    Tensor idx = is_max ? si.get() : Tensor();
    if (is_max)
      kernels::run(go.device(), &Backend::max_pool2d_backward, go, idx, gx);
    else
      kernels::run(go.device(), &Backend::avg_pool2d_backward, go, gx, g);
    // The backward is linear in the gradient; its own backward is the adjoint: gathering at the
    // argmax indices, or the average pooling itself.
    autograd::record(id, {grads[0]}, {gx}, [=](const TensorList& gg, const Node&) {
      if (!is_max) return TensorList{avg_pool2d(gg[0], kernel, stride, padding)};
      Tensor flat = gg[0].reshape({g.n, g.c, g.h * g.w});
      return TensorList{gather(flat, 2, idx.view({g.n, g.c, g.oh * g.ow})).view({g.n, g.c, g.oh, g.ow})};
    });
    return TensorList{gx};
  });
  return out;
}
}  // namespace

Tensor max_pool2d(const Tensor& input, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding) {
  return pool2d(Op::max_pool2d, true, input, kernel, stride, padding);
}
Tensor avg_pool2d(const Tensor& input, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding) {
  check_floating("avg_pool2d", input);
  return pool2d(Op::avg_pool2d, false, input, kernel, stride, padding);
}

}  // namespace mg
