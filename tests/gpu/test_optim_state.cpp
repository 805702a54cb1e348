// The 8-bit Adam and Adafactor on CUDA against the CPU: AdamW8bit's codes, absmax and parameters bit
// for bit (neither device contracts multiply-adds in its kernel), Adafactor to float32 rounding (its
// sums add in another order), and the scratch a cuda plan books.
#include <memory>
#include <optional>

#include "gpu_util.h"

using namespace gpu_test;

namespace {

// Steps cpu and cuda copies of parameters of `shapes` (dtype t) with the same gradients, and
// compares the parameters and every state tensor: bit for bit, or within `tol` when given.
template <class Make>
void check_parity(const std::vector<Shape>& shapes, DType t, Make make, std::optional<Tol> tol = std::nullopt) {
  manual_seed(30);
  std::vector<Tensor> init;
  for (const Shape& s : shapes) init.push_back(randn(s).to(t));
  std::vector<std::vector<Tensor>> grads(4);
  for (auto& step : grads)
    for (const Shape& s : shapes) step.push_back(randn(s).to(t));
  std::vector<Tensor> params[2];
  optim::StateDict state[2];
  for (int d = 0; d < 2; ++d) {
    const Device dev = d ? kGPU : kCPU;
    for (const Tensor& x : init) params[d].push_back(x.to(dev).clone().requires_grad_());
    auto opt = make(params[d]);
    for (auto& step : grads) {
      for (size_t i = 0; i < shapes.size(); ++i) params[d][i].set_grad(step[i].to(dev));
      opt->step();
    }
    state[d] = opt->state_dict();
  }
  auto compare = [&](const Tensor& got, const Tensor& want, const std::string& what) {
    tol ? expect_close(got, want, *tol, what) : expect_equal(got, want, what);
  };
  for (size_t i = 0; i < shapes.size(); ++i) compare(params[1][i].detach(), params[0][i].detach(), "param");
  REQUIRE(state[0].size() == state[1].size());
  for (auto& [key, want] : state[0]) compare(state[1].at(key), want, key);
}

}  // namespace

TEST_CASE("cuda: AdamW8bit equals the cpu bit for bit, every dtype, odd sizes, 8-bit and 32-bit state") {
  const std::vector<Shape> shapes = {{1}, {255}, {256}, {257}, {3, 1000}, {4096}, {(1 << 20) + 7}, {0}};
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(t);
    check_parity(shapes, t, [](const std::vector<Tensor>& p) {
      return std::make_unique<optim::AdamW8bit>(p, optim::AdamW8bitOptions(1e-2).min_8bit_size(256));
    });
  }
}

TEST_CASE("cuda: Adafactor matches the cpu (factored, batched, vector, first moment, weight decay)") {
  const std::vector<Shape> shapes = {{7, 5}, {2, 3, 300}, {70000}, {1}, {1000, 257}, {0, 4}};
  for (DType t : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(t);
    const Tol tol = t == kFloat64 ? Tol{1e-12, 1e-14} : t == kFloat32 ? Tol{2e-5, 1e-6} : tol_for(t);
    check_parity(
        shapes, t,
        [](const std::vector<Tensor>& p) {
          return std::make_unique<optim::Adafactor>(p, optim::AdafactorOptions(0.05).beta1(0.9).weight_decay(0.01));
        },
        tol);
  }
}

TEST_CASE("cuda: Adafactor on a matrix taller than CUDA's grid allows in y (65535 chunks of 256 rows)") {
  // 65538 chunks of column sums: launched in one grid, their y dimension was past the limit.
  const std::vector<Shape> shapes = {{65537 * 256 + 3, 1}};
  check_parity(
      shapes, kFloat32,
      [](const std::vector<Tensor>& p) { return std::make_unique<optim::Adafactor>(p, optim::AdafactorOptions(0.05)); },
      Tol{2e-5, 1e-6});
}

TEST_CASE("cuda: a plan for cuda books Adafactor's scratch as its CUDA kernels allocate it") {
  for (bool in_backward : {false, true}) {
    train::StepOptions o;
    o.optimizer = optim::OptimizerSpec("adafactor");
    o.step_in_backward = in_backward;
    const train::ModelSpec mlp = train::ModelSpec::mlp(3, 300);
    plan::PlanOptions target;
    target.device = DeviceType::CUDA;
    const plan::StepReport p = plan::plan(mlp, {8, 1}, o, {}, target);
    plan::StepContext ctx = plan::context({8, 1});
    ctx.device = kGPU;
    plan::PlanOptions steps;
    steps.steps = p.steps;
    const plan::StepReport m = plan::measure(plan::program(mlp, {8, 1}, o), ctx, steps);
    CHECK(m.peak == p.peak);
    CHECK(m.first_peak == p.first_peak);
    CHECK(m.peak_of(Category::Workspace) == p.peak_of(Category::Workspace));
    CHECK(p.peak_of(Category::Workspace) > 0);
  }
}
