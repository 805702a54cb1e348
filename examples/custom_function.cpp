// The custom-function API: bring your own forward kernel and backward rule, then let
// gradcheck (float64 finite differences) tell you whether the two agree.
//
// Softplus(x) = log(1 + exp(x)), computed by a hand-written loop (a stand-in for a user's
// kernel); its derivative is sigmoid(x), written with ops so it runs on every device.
#include <cmath>
#include <cstdio>

#include <memgrad/memgrad.h>

using mg::Tensor;
using mg::autograd::FunctionCtx;
using mg::autograd::TensorList;

struct Softplus : mg::autograd::Function<Softplus> {
  static TensorList forward(FunctionCtx& ctx, const TensorList& in) {
    Tensor x = in[0].contiguous(), y = mg::empty(x.shape(), x.options());
    if (x.dtype() == mg::kFloat64) {
      run_kernel(x.data_ptr<double>(), y.data_ptr<double>(), x.numel());
    } else {
      run_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    }
    ctx.save_for_backward({in[0]});  // counts as Activation until backward has run
    return {y};
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grad) {
    return {grad[0] * mg::sigmoid(ctx.saved()[0])};
  }

 private:
  template <class T>
  static void run_kernel(const T* x, T* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 20 ? x[i] : std::log1p(std::exp(x[i]));  // stable for large x
  }
};

int main() {
  mg::manual_seed(1);
  // 1. The custom function against the same formula built from library ops.
  Tensor x = (mg::randn({4, 5}) * 3.0).requires_grad_();
  Tensor y = Softplus::apply({x}, "softplus")[0];
  Tensor reference = mg::log(mg::exp(x.detach()) + 1.0);
  bool forward_ok = mg::allclose(y.detach(), reference, 1e-5, 1e-6);
  y.sum().backward();
  bool grad_ok = mg::allclose(x.grad(), mg::sigmoid(x.detach()), 1e-5, 1e-6);
  std::printf("forward matches ops: %s\ngradient matches sigmoid: %s\n", forward_ok ? "yes" : "NO",
              grad_ok ? "yes" : "NO");

  // 2. gradcheck: the analytic backward against central differences in float64.
  Tensor x64 = (mg::randn({3, 4}, mg::kFloat64) * 3.0).requires_grad_();
  mg::GradcheckResult check =
      mg::gradcheck([](const std::vector<Tensor>& in) { return Softplus::apply(in)[0]; }, {x64});
  std::printf("gradcheck: %s (max abs error %.2e)%s%s\n", check.ok ? "passed" : "FAILED", check.max_abs_error,
              check.ok ? "" : "\n  ", check.message.c_str());
  return forward_ok && grad_ok && check.ok ? 0 : 1;
}
