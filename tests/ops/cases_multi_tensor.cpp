// Optimizer steps (kernels/*/multi_tensor.*: one launch updates many tensors): SGD, Adam, AdamW and
// Lion over several parameters of odd sizes, three steps with the same gradients (Lion's: scaled by
// "flip" at the second step). Inputs are the
// parameters, then their gradients; outputs the parameters after the steps. The ledger comparison
// on meta covers the optimizer state the first step allocates.
#include <memory>

#include <memgrad/optim/adam.h>
#include <memgrad/optim/lion.h>
#include <memgrad/optim/sgd.h>

#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const Tensors& params, const Args& a)>;

// Copies of the parameters, each with its gradient, stepped `steps` times; with a "flip" argument
// the gradients are scaled by it at every second step (steps 1, 3, ...).
OpFn stepping(MakeOptimizer make) {
  return [make](const Tensors& x, const Args& a) {
    const size_t n = x.size() / 2;
    const double flip = a.count("flip") ? float_arg(a, "flip") : 1.0;
    Tensors params;
    for (size_t i = 0; i < n; ++i) {
      params.push_back(x[i].detach().clone().requires_grad_());
      params.back().set_grad(x[n + i].detach().clone());
    }
    auto opt = make(params, a);
    for (int64_t s = 0; s < int_arg(a, "steps"); ++s) {
      if (flip != 1.0)
        for (size_t i = 0; i < n; ++i) params[i].set_grad(s % 2 ? x[n + i].detach() * flip : x[n + i].detach().clone());
      opt->step();
    }
    Tensors out;
    for (const Tensor& p : params) out.push_back(p.detach());
    return out;
  };
}

// Parameters then gradients: one element, a matrix, an empty tensor, an odd length; for the gpu,
// one past the kernel's 16384-element chunk, several chunks plus a few, and 40 small tensors (more
// than one launch takes).
std::vector<Input> params_and_grads(const std::vector<Shape>& shapes) {
  std::vector<Input> in;
  for (const Shape& s : shapes) in.push_back(U(s, -1.7, 1.7).no_grad());
  for (const Shape& s : shapes) in.push_back(U(s, -1, 1).no_grad());
  return in;
}
const std::vector<Shape> kSmall = {{1}, {7, 3}, {0}, {33}};
std::vector<Shape> big_shapes() {
  std::vector<Shape> s = {{16385}, {3 * 16384 + 5}, {257, 129}};
  for (int i = 0; i < 40; ++i) s.push_back({int64_t(1 + (i * 37) % 101)});
  return s;
}

// Step cases with `options`, small and large. The devices may contract a * b + c into one fma
// differently: a unit or two in the last place.
void step_cases(OpDef& op, const std::string& name, Args options) {
  options["steps"] = 3;
  const std::string why = "an optimizer step is not differentiated";
  op.add_case(name, params_and_grads(kSmall), options).no_backward(why);
  op.add_case(name + "_big", params_and_grads(big_shapes()), options).no_backward(why).big();
}

Tol optim_tol(DType t, const std::string&) {
  return t == kFloat32 ? Tol{1e-5, 1e-6} : t == kFloat64 ? Tol{1e-12, 1e-14} : tol_for(t);
}

}  // namespace

MG_OP_CASES(sgd_step) {
  call(stepping([](const Tensors& p, const Args& a) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions(float_arg(a, "lr"))
                                               .momentum(float_arg(a, "momentum"))
                                               .dampening(float_arg(a, "dampening"))
                                               .weight_decay(float_arg(a, "weight_decay"))
                                               .nesterov(bool_arg(a, "nesterov"))
                                               .maximize(bool_arg(a, "maximize")));
  }));
  defaults().cuda_tolerance(optim_tol);
  auto sgd = [](double lr, double momentum, double dampening, double decay, bool nesterov, bool maximize) {
    return Args{{"lr", lr},
                {"momentum", momentum},
                {"dampening", dampening},
                {"weight_decay", decay},
                {"nesterov", nesterov},
                {"maximize", maximize}};
  };
  step_cases(*this, "sgd", sgd(0.1, 0, 0, 0, false, false));
  step_cases(*this, "sgd_momentum_dampening_decay", sgd(0.05, 0.9, 0.1, 0.01, false, false));
  step_cases(*this, "sgd_nesterov_maximize", sgd(0.05, 0.9, 0, 0.01, true, true));
}

namespace {
template <class Options>
Options adam_options(const Args& a) {
  Options o(float_arg(a, "lr"));
  o.betas(float_arg(a, "beta1"), float_arg(a, "beta2"))
      .weight_decay(float_arg(a, "weight_decay"))
      .amsgrad(bool_arg(a, "amsgrad"))
      .maximize(bool_arg(a, "maximize"));
  return o;
}
Args adam(double lr, double beta1, double beta2, double decay, bool amsgrad, bool maximize) {
  return {{"lr", lr},           {"beta1", beta1},      {"beta2", beta2}, {"weight_decay", decay},
          {"amsgrad", amsgrad}, {"maximize", maximize}};
}
}  // namespace

MG_OP_CASES(adam_step) {
  call(stepping([](const Tensors& p, const Args& a) {
    return std::make_unique<optim::Adam>(p, adam_options<optim::AdamOptions>(a));
  }));
  defaults().cuda_tolerance(optim_tol);
  step_cases(*this, "adam", adam(0.01, 0.9, 0.999, 0, false, false));
  step_cases(*this, "adam_amsgrad_decay", adam(0.01, 0.8, 0.95, 0.01, true, false));
}

MG_OP_CASES(adamw_step) {
  call(stepping([](const Tensors& p, const Args& a) {
    return std::make_unique<optim::AdamW>(p, adam_options<optim::AdamWOptions>(a));
  }));
  defaults().cuda_tolerance(optim_tol);
  step_cases(*this, "adamw", adam(0.01, 0.9, 0.999, 0.1, false, false));
  step_cases(*this, "adamw_amsgrad_maximize", adam(0.02, 0.9, 0.999, 0.01, true, true));
}

namespace {
Args lion(double lr, double beta1, double beta2, double decay, double flip, bool maximize) {
  return {{"lr", lr},     {"beta1", beta1},      {"beta2", beta2}, {"weight_decay", decay},
          {"flip", flip}, {"maximize", maximize}};
}
}  // namespace

// lion-pytorch's semantics (tests/reference/make_fixtures.py writes its update in torch: torch 1.13
// has no Lion). With flip -0.05 the second step's gradient points against the momentum but is too
// small to turn c = beta1 * m + (1 - beta1) * g, so the sign follows the momentum; with -5 it turns.
MG_OP_CASES(lion_step) {
  call(stepping([](const Tensors& p, const Args& a) {
    return std::make_unique<optim::Lion>(p, optim::LionOptions(float_arg(a, "lr"))
                                                .betas(float_arg(a, "beta1"), float_arg(a, "beta2"))
                                                .weight_decay(float_arg(a, "weight_decay"))
                                                .maximize(bool_arg(a, "maximize")));
  }));
  defaults().cuda_tolerance(optim_tol);
  step_cases(*this, "lion", lion(1e-2, 0.9, 0.99, 0, 1, false));
  step_cases(*this, "lion_momentum_wins_decay", lion(1e-2, 0.9, 0.99, 0.1, -0.05, false));
  step_cases(*this, "lion_gradient_wins_maximize", lion(3e-2, 0.95, 0.98, 0.01, -5, true));
}
