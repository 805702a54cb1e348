// The fused multi-tensor optimizer step and loss-scaler unscale on CUDA against the CPU: several
// parameter groups, sizes around the kernel's chunk (16384 elements) and batch boundaries (a
// launch takes at most 31 tensors for Adam, 47 for SGD, 151 for unscale_: 157 tensors in two
// groups need several), empty tensors, parameters whose step counts differ, every floating dtype.
#include <memory>

#include "gpu_util.h"

using namespace gpu_test;

namespace {

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

struct Config {
  const char* name;
  MakeOpt make;
};

std::vector<Config> configs() {
  using namespace optim;
  return {
      {"sgd", [](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions(0.1)); }},
      {"sgd momentum dampening decay",
       [](auto g) {
         return std::make_unique<SGD>(std::move(g), SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01));
       }},
      {"sgd nesterov maximize",
       [](auto g) {
         return std::make_unique<SGD>(std::move(g),
                                      SGDOptions(0.05).momentum(0.9).nesterov().weight_decay(0.01).maximize());
       }},
      {"adam", [](auto g) { return std::make_unique<Adam>(std::move(g), AdamOptions(0.01)); }},
      {"adam amsgrad decay",
       [](auto g) {
         return std::make_unique<Adam>(std::move(g), AdamOptions(0.01).betas(0.8, 0.95).weight_decay(0.01).amsgrad());
       }},
      {"adamw", [](auto g) { return std::make_unique<AdamW>(std::move(g), AdamWOptions(0.01).weight_decay(0.1)); }},
      {"adamw amsgrad maximize",
       [](auto g) { return std::make_unique<AdamW>(std::move(g), AdamWOptions(0.02).amsgrad().maximize()); }},
  };
}

// Odd sizes: single elements, an empty tensor, one element past a chunk, several chunks plus a
// few, a large one, and enough small tensors to fill several launches.
std::vector<Shape> shapes() {
  std::vector<Shape> s = {{1}, {7, 3}, {0}, {16385}, {3 * 16384 + 5}, {257, 129}, {(1 << 20) + 3}};
  for (int i = 0; i < 150; ++i) s.push_back({int64_t(1 + (i * 37) % 101)});
  return s;
}

Tol optim_tol(DType t) {
  // The devices may contract a * b + c into one fma differently: a unit or two in the last place.
  return t == kFloat32 ? Tol{1e-5, 1e-6} : t == kFloat64 ? Tol{1e-12, 1e-14} : tol_for(t);
}

// Runs `steps` steps on cpu and cuda copies of the same parameters (dtypes[i % size]) and
// gradients, in two groups (the second with its own lr); parameter 2 and every fifth skip the
// first step, so step counts differ within a group. Compares parameters and every state tensor.
void check_parity(const Config& c, const std::vector<DType>& dtypes, int steps = 3) {
  manual_seed(21);
  const std::vector<Shape> s = shapes();
  std::vector<Tensor> pc, pg;
  for (size_t i = 0; i < s.size(); ++i) {
    Tensor init = randn(s[i]).to(dtypes[i % dtypes.size()]);
    pc.push_back(init.clone().requires_grad_());
    pg.push_back(init.to(kGPU).requires_grad_());
  }
  auto groups = [&](const std::vector<Tensor>& p) {
    size_t half = p.size() / 2;
    optim::ParamGroup a{std::vector<Tensor>(p.begin(), p.begin() + long(half)), {}, {}};
    optim::ParamGroup b{std::vector<Tensor>(p.begin() + long(half), p.end()), {}, {{"lr", 0.003}}};
    return std::vector<optim::ParamGroup>{a, b};
  };
  auto oc = c.make(groups(pc)), og = c.make(groups(pg));
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (step == 0 && i % 5 == 2) {
        pc[i].set_grad(Tensor()), pg[i].set_grad(Tensor());
        continue;
      }
      Tensor g = randn(s[i]).to(pc[i].dtype());
      pc[i].set_grad(g.clone()), pg[i].set_grad(g.to(kGPU));
    }
    oc->step();
    og->step();
  }
  std::string what = std::string(c.name) + " (" + dtype_name(dtypes[0]) + (dtypes.size() > 1 ? " mixed)" : ")");
  for (size_t i = 0; i < s.size(); ++i)
    expect_close(pg[i].detach(), pc[i].detach(), optim_tol(pc[i].dtype()), what + " param " + std::to_string(i));
  auto sc = oc->state_dict(), sg = og->state_dict();
  REQUIRE(sc.size() == sg.size());
  for (auto& [key, want] : sc) {
    REQUIRE_MESSAGE(sg.count(key), what, ": cuda state lacks ", key);
    expect_close(sg.at(key), want, optim_tol(want.dtype()), what + " " + key);
  }
}

}  // namespace

TEST_CASE("cuda: fused SGD, Adam and AdamW steps match the cpu, every dtype and odd sizes") {
  for (const Config& c : configs())
    for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) check_parity(c, {t});
}

TEST_CASE("cuda: one optimizer over parameters of several dtypes") {
  for (const Config& c : configs()) check_parity(c, {kFloat32, kFloat16, kBFloat16, kFloat64}, 2);
}

TEST_CASE("cuda: a training step with AdamW moves the loss as on the cpu") {
  manual_seed(5);
  Tensor x = randn({64, 33}), y = randn({64, 5}), w0 = randn({33, 5}) * 0.1, b0 = zeros({5});
  std::vector<double> losses[2];
  for (int d = 0; d < 2; ++d) {
    Device dev = d ? kGPU : kCPU;
    Tensor w = w0.to(dev).requires_grad_(), b = b0.to(dev).requires_grad_(), xd = x.to(dev), yd = y.to(dev);
    optim::AdamW opt(std::vector<Tensor>{w, b}, optim::AdamWOptions(0.05));
    for (int step = 0; step < 10; ++step) {
      Tensor loss = mean(pow(matmul(xd, w) + b - yd, 2.0));
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses[d].push_back(loss.item<double>());
    }
  }
  CHECK(losses[1].back() < losses[1].front());
  for (size_t i = 0; i < losses[0].size(); ++i) CHECK(losses[1][i] == doctest::Approx(losses[0][i]).epsilon(1e-3));
}

TEST_CASE("cuda: GradScaler unscale_ and the inf/NaN check are fused and bit-identical to the cpu") {
  for (DType t : {kFloat32, kFloat16, kBFloat16}) {
    manual_seed(9);
    const std::vector<Shape> s = shapes();
    std::vector<Tensor> pc, pg, grads;
    for (auto& shape : s) {
      pc.push_back(zeros(shape, t).requires_grad_());
      pg.push_back(zeros(shape, TensorOptions(t).device(kGPU)).requires_grad_());
      grads.push_back((randn(shape) * 3000.0).to(t));
    }
    for (int bad = 0; bad < 3; ++bad) {  // none, an inf at the end of the large tensor, a NaN in a small one
      for (size_t i = 0; i < s.size(); ++i) {
        Tensor g = grads[i].clone();
        if (bad == 1 && i == 6) g.narrow(0, g.size(0) - 1, 1).fill_(INFINITY);
        if (bad == 2 && i == 20) g.narrow(0, 0, 1).fill_(NAN);
        pc[i].set_grad(g), pg[i].set_grad(g.to(kGPU));
      }
      optim::SGD oc(pc, optim::SGDOptions(0.1)), og(pg, optim::SGDOptions(0.1));
      amp::GradScaler sc, sg;
      sc.unscale_(oc);
      sg.unscale_(og);
      std::string what = std::string("unscale_ ") + dtype_name(t) + " case " + std::to_string(bad);
      CHECK_MESSAGE(sc.found_inf() == (bad != 0), what);
      CHECK_MESSAGE(sg.found_inf() == sc.found_inf(), what);
      for (size_t i = 0; i < s.size(); ++i)
        expect_equal(pg[i].grad(), pc[i].grad(), what + " grad " + std::to_string(i));
      CHECK(sg.step(og) == (bad == 0));
      sg.update();
      CHECK(sg.get_scale() == (bad == 0 ? 65536.0 : 32768.0));
    }
  }
  Tensor ok = randn({5, 7}, kGPU), bad = ok.clone();
  bad.narrow(0, 4, 1).fill_(-INFINITY);
  CHECK_FALSE(amp::any_non_finite({ok, Tensor(), ok.t()}));
  CHECK(amp::any_non_finite({ok, bad.t()}));                                      // a non-contiguous view
  CHECK(amp::any_non_finite({ok.to(kFloat16), bad.to(kBFloat16), ok.to(kCPU)}));  // several devices
}
