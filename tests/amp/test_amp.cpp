// Autocast, master weights and loss scaling: what each does to the ledger, and that training
// in half precision follows float32.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include <memgrad/amp/grad_scaler.h>
#include <memgrad/memgrad.h>
#include <memgrad/nn/gpt.h>
#include <memgrad/optim/adam.h>
#include <memgrad/optim/sgd.h>

using namespace mg;

namespace {
int64_t category(Category c) { return memory_stats().category(c); }
}  // namespace

TEST_CASE("autocast: matmuls run on half inputs, precision-sensitive ops in float32") {
  manual_seed(1);
  Tensor x = randn({8, 16}), w = randn({32, 16}).requires_grad_(), b = zeros({32}).requires_grad_();
  amp::AutocastGuard guard(kFloat16);
  Tensor y = linear(x, w, b);
  CHECK(y.dtype() == kFloat16);
  CHECK(softmax(y, 1).dtype() == kFloat32);
  CHECK(layer_norm(y, {32}).dtype() == kFloat32);
  CHECK(sum(y).dtype() == kFloat32);
  CHECK(exp(y).dtype() == kFloat32);
  // The parameter's half copy is made once per guard, however often it is used.
  CHECK(amp::cast_for_half_op(w).is_same(amp::cast_for_half_op(w)));
  // Gradients flow back to the float32 parameter through the cast.
  cross_entropy(linear(x, w, b), randint(0, 32, {8})).backward();
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(w.grad().shape() == w.shape());
  // Values agree with float32 to half precision.
  amp::AutocastGuard off(kFloat16, false);
  Tensor ref = linear(x, w, b);
  CHECK(allclose(y.to(kFloat32), ref, 1e-2, 1e-2));
}

TEST_CASE("autocast: saved activations are half, so the ledger shows the halving") {
  manual_seed(2);
  // 32 x 64 activations: 8192 bytes in float32, 4096 in float16 (both multiples of 512).
  Tensor x0 = randn({32, 64});
  Tensor w1 = randn({64, 64}).requires_grad_(), w2 = randn({64, 64}).requires_grad_();
  auto forward_activation = [&](bool half) {
    int64_t before = category(Category::Activation);
    amp::AutocastGuard guard(kFloat16, half);
    Tensor h = relu(linear(relu(linear(x0 * 1.0, w1)), w2));  // x0 * 1.0: an op output, saved by fc1
    return category(Category::Activation) - before;
  };
  int64_t full = forward_activation(false), half = forward_activation(true);
  // fp32: fc1 saves its input (8192), relu1 its output (8192), fc2 its input (same tensor), relu2 (8192).
  CHECK(full == 3 * 8192);
  // fp16: the same three tensors in half (the float32 input is not saved), plus fc2's half copy of
  // w2 (64 x 64 x 2 bytes), which fc2 saves for its input's gradient: autocast's price for w2.
  // (fc1 saves no weight: its input needs no gradient.)
  CHECK(half == 3 * 4096 + 64 * 64 * 2);
}

TEST_CASE("half storage halves an MLP's Activation bytes, to the byte") {
  auto run = [](DType t) {
    manual_seed(3);
    nn::Linear fc1(64, 64), fc2(64, 64);
    fc1.to(t);
    fc2.to(t);
    Tensor x = randn({32, 64}).to(t);
    int64_t before = category(Category::Activation);
    Tensor y = fc2(relu(fc1(x * 1.0)));
    return category(Category::Activation) - before;
  };
  int64_t f32 = run(kFloat32), f16 = run(kFloat16), bf16 = run(kBFloat16);
  CHECK(f32 == 2 * 8192);  // fc1's input and relu's output (= fc2's input): 32 x 64 x 4 bytes each
  CHECK(f16 * 2 == f32);
  CHECK(bf16 * 2 == f32);
}

TEST_CASE("GradScaler: an injected inf skips exactly one step and halves the scale") {
  manual_seed(4);
  Tensor w = randn({4, 4}).requires_grad_();
  optim::SGD opt(std::vector<Tensor>{w}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().growth_interval(3));
  CHECK(scaler.get_scale() == 65536.0);
  Tensor x = randn({2, 4});
  int stepped = 0;
  for (int i = 0; i < 7; ++i) {
    opt.zero_grad();
    Tensor loss = matmul(x, w).pow(2.0).mean();
    if (i == 2) loss = loss * std::numeric_limits<float>::infinity();
    scaler.scale(loss).backward();
    auto before = w.to_vector<float>();
    bool did = scaler.step(opt);
    stepped += did;
    CHECK(did == (i != 2));
    if (!did) CHECK(w.to_vector<float>() == before);
    scaler.update();
    if (i == 1) CHECK(scaler.get_scale() == 65536.0);
    if (i == 2) CHECK(scaler.get_scale() == 32768.0);  // halved once
    if (i == 5) CHECK(scaler.get_scale() == 65536.0);  // doubled after 3 clean steps
  }
  CHECK(stepped == 6);
  CHECK(scaler.skipped_steps() == 1);
}

TEST_CASE("GradScaler: PyTorch's (>= 2.1) rules over many steps, the float32 scale capped below inf") {
  // The rules of torch's _amp_update_scale_, written out: the scale is a float32; an inf or NaN
  // backs it off and resets the count; growth_interval clean steps grow it, unless that would
  // overflow float32, and reset the count either way.
  struct Rules {
    float scale;
    int64_t tracker = 0;
    void update(bool found_inf, double growth, double backoff, int64_t interval) {
      if (found_inf) {
        scale = float(scale * backoff);
        tracker = 0;
      } else if (++tracker == interval) {
        const float grown = float(scale * growth);
        if (std::isfinite(grown)) scale = grown;
        tracker = 0;
      }
    }
  };
  struct Setting {
    double init, growth, backoff;
    int64_t interval;
  };
  for (const Setting& s : {Setting{65536.0, 2.0, 0.5, 2}, Setting{1000.0, 3.0, 0.25, 1}, Setting{0.75, 1.5, 0.7, 3}}) {
    CAPTURE(s.growth);
    Tensor w = ones({4}).requires_grad_();
    optim::SGD opt(std::vector<Tensor>{w}, optim::SGDOptions(1e-6));
    amp::GradScaler scaler(
        amp::GradScalerOptions().init_scale(s.init).growth_factor(s.growth).backoff_factor(s.backoff).growth_interval(
            s.interval));
    Rules rules{float(s.init)};
    std::mt19937 rng(11);
    int64_t capped_steps = 0;
    for (int step = 0; step < 1200; ++step) {
      // An inf now and then while the scale climbs; none once it has reached the top.
      const bool inject = step < 500 && rng() % 17 == 0;
      opt.zero_grad();
      Tensor loss = (w * 1e-3).sum();  // gradients of 1e-3 * scale stay finite up to 2^127
      if (inject) loss = loss * std::numeric_limits<float>::infinity();
      scaler.scale(loss).backward();
      const bool stepped = scaler.step(opt);
      CHECK(stepped == !inject);  // no step is skipped but the injected ones, even at the top
      scaler.update();
      rules.update(inject, s.growth, s.backoff, s.interval);
      REQUIRE(scaler.get_scale() == double(rules.scale));
      CHECK(scaler.growth_tracker() == rules.tracker);
      CHECK(std::isfinite(float(scaler.get_scale())));
      capped_steps += std::isinf(float(scaler.get_scale() * s.growth));
    }
    CHECK(capped_steps > 100);  // the scale spent the end of the run at its ceiling
    if (s.growth == 2.0) CHECK(scaler.get_scale() == std::ldexp(1.0, 127));
  }
}

TEST_CASE("GradScaler: unscale_ once per step, state_dict round trip, static scale") {
  Tensor w = ones({3}).requires_grad_();
  optim::SGD opt(std::vector<Tensor>{w}, optim::SGDOptions(0.1));
  amp::GradScaler scaler;
  scaler.scale((w * 2.0).sum()).backward();
  scaler.unscale_(opt);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK_THROWS_AS(scaler.unscale_(opt), ValueError);
  scaler.step(opt);
  scaler.update();
  auto state = scaler.state_dict();
  amp::GradScaler other;
  other.load_state_dict(state);
  CHECK(other.get_scale() == scaler.get_scale());
  CHECK(other.growth_tracker() == 1);
  CHECK_THROWS_AS(other.load_state_dict({{"scale", 1.0}}), ValueError);

  amp::GradScaler fixed(amp::GradScalerOptions().init_scale(1024).dynamic(false));
  opt.zero_grad();
  fixed.scale((w * std::numeric_limits<float>::infinity()).sum()).backward();
  CHECK_FALSE(fixed.step(opt));
  fixed.update();
  CHECK(fixed.get_scale() == 1024.0);
}

TEST_CASE("loss scaling: float16 gradients that underflow to zero train once scaled") {
  // d loss / d w = 1e-8 * x: below float16's smallest subnormal (6e-8), so it flushes to zero.
  auto train = [](bool scaled, int64_t* zero_grads) {
    manual_seed(5);
    nn::Linear fc(8, 1, false);
    fc.to(kFloat16);
    amp::MasterWeights masters(fc.named_parameters());
    optim::SGD opt(masters.parameters(), optim::SGDOptions(1e6));
    amp::GradScaler scaler(amp::GradScalerOptions().enabled(scaled));
    Tensor x = (rand({16, 8}) + 0.5).to(kFloat16);
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) {
      opt.zero_grad();
      for (auto& p : fc.parameters()) p.set_grad(Tensor());
      Tensor loss = fc(x).to(kFloat32).mean() * 1e-8;
      scaler.scale(loss).backward();
      if (i == 0) {
        auto g = fc.weight.grad().to_vector<float>();
        *zero_grads = int64_t(std::count(g.begin(), g.end(), 0.0f));
        first = loss.item<double>();
      }
      scaler.step(opt, masters);
      scaler.update();
      last = loss.item<double>();
    }
    return last - first;
  };
  int64_t zeros_plain = 0, zeros_scaled = 0;
  double change_plain = train(false, &zeros_plain), change_scaled = train(true, &zeros_scaled);
  CHECK(zeros_plain == 8);   // every gradient underflowed
  CHECK(zeros_scaled == 0);  // none did
  CHECK(change_plain == 0.0);
  CHECK(change_scaled < 0.0);  // the loss went down
}

TEST_CASE("mixed-precision Adam holds 16 bytes per parameter between steps, as ZeRO counts") {
  manual_seed(6);
  nn::Linear fc(256, 256, false);  // 65536 parameters: every buffer a multiple of 512 bytes
  fc.to(kFloat16);
  amp::MasterWeights masters(fc.named_parameters());
  optim::Adam opt(masters.named_parameters());
  Tensor x = randn({8, 256}).to(kFloat16);
  fc(x).to(kFloat32).pow(2.0).mean().backward();
  amp::GradScaler scaler;
  scaler.step(opt, masters);
  scaler.update();
  const int64_t n = 65536;
  CHECK(category(Category::Parameter) >= 2 * n);
  CHECK(fc.weight.storage()->block()->size == size_t(2 * n));         // half parameter
  CHECK(fc.weight.grad().storage()->block()->size == size_t(2 * n));  // half gradient
  CHECK(opt.state_bytes() == 8 * n);                                  // exp_avg + exp_avg_sq in float32
  CHECK(masters.parameters()[0].storage()->block()->size == size_t(4 * n));
  CHECK_FALSE(masters.parameters()[0].grad().defined());  // master gradients live only during a step
  CHECK(masters.parameters()[0].storage()->category() == Category::OptimizerState);
}

TEST_CASE("bfloat16 storage trains without a scaler") {
  manual_seed(7);
  nn::Linear fc1(4, 32), fc2(32, 3);
  fc1.to(kBFloat16);
  fc2.to(kBFloat16);
  std::vector<std::pair<std::string, Tensor>> named;
  for (auto& p : fc1.named_parameters()) named.emplace_back("fc1." + p.first, p.second);
  for (auto& p : fc2.named_parameters()) named.emplace_back("fc2." + p.first, p.second);
  amp::MasterWeights masters(named);
  optim::Adam opt(masters.parameters(), optim::AdamOptions(1e-2));
  Tensor x = randn({64, 4});
  Tensor y = argmax(linear(x, randn({3, 4})), 1);  // a learnable labelling
  double first = 0, last = 0;
  for (int i = 0; i < 60; ++i) {
    Tensor loss = cross_entropy(fc2(relu(fc1(x.to(kBFloat16)))), y);
    if (i == 0) first = loss.item<double>();
    last = loss.item<double>();
    loss.backward();
    masters.grads_to_masters();
    opt.step();
    masters.masters_to_params();
    for (auto& [n, p] : named) p.set_grad(Tensor());
  }
  CHECK(last < 0.5 * first);
}

TEST_CASE("a tiny GPT trained in fp16 with dynamic scaling ends within 2% of float32") {
  auto train = [](bool half) {
    manual_seed(8);
    nn::GPTConfig c;
    c.vocab_size = 32;
    c.block_size = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 32;
    nn::GPT model(c);
    optim::AdamW opt(model.named_parameters(), optim::AdamWOptions(3e-3));
    amp::GradScaler scaler(amp::GradScalerOptions().enabled(half));
    Tensor data = randint(0, 8, {16, 17});  // a small vocabulary: learnable unigram statistics
    Tensor idx = data.narrow(1, 0, 16).contiguous(), tgt = data.narrow(1, 1, 16).contiguous();
    double loss_value = 0;
    for (int step = 0; step < 40; ++step) {
      opt.zero_grad();
      Tensor loss;
      {
        amp::AutocastGuard guard(kFloat16, half);
        loss = model.loss(idx, tgt);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      loss_value = loss.item<double>();
    }
    return loss_value;
  };
  double f32 = train(false), f16 = train(true);
  CHECK(f32 < std::log(32.0) * 0.8);  // it learned something
  CHECK(std::abs(f16 - f32) <= 0.02 * f32);
}

TEST_CASE("bytes per parameter of each mode, from the ledger (see docs/precision.md)") {
  const int64_t n = 65536;  // a 256 x 256 weight: every buffer is a multiple of 512 bytes
  auto step = [&](DType storage, bool masters_on, bool autocast) {
    manual_seed(9);
    nn::Linear fc(256, 256, false);
    fc.to(storage);
    Tensor x = randn({8, 256});
    std::unique_ptr<amp::MasterWeights> masters;
    std::unique_ptr<optim::Adam> opt;
    if (masters_on) {
      masters = std::make_unique<amp::MasterWeights>(fc.named_parameters());
      opt = std::make_unique<optim::Adam>(masters->named_parameters());
    } else {
      opt = std::make_unique<optim::Adam>(fc.named_parameters());
    }
    {
      amp::AutocastGuard guard(kFloat16, autocast);
      fc(x.to(storage)).to(kFloat32).pow(2.0).mean().backward();
    }
    if (masters_on) masters->grads_to_masters();
    opt->step();
    if (masters_on) masters->masters_to_params();
    int64_t param = int64_t(fc.weight.storage()->block()->size),
            grad = int64_t(fc.weight.grad().storage()->block()->size);
    int64_t master = masters_on ? int64_t(masters->parameters()[0].storage()->block()->size) : 0;
    return std::array<int64_t, 4>{param / n, grad / n, (master + opt->state_bytes()) / n,
                                  (param + grad + master + opt->state_bytes()) / n};
  };
  using Row = std::array<int64_t, 4>;                       // parameter, gradient, optimizer state (+ masters), total
  CHECK(step(kFloat32, false, false) == Row{4, 4, 8, 16});  // float32 Adam
  CHECK(step(kFloat32, false, true) == Row{4, 4, 8, 16});   // autocast: float32 parameters, half compute
  CHECK(step(kFloat16, true, false) == Row{2, 2, 12, 16});  // half storage + float32 masters = ZeRO's 2+2+12
  CHECK(step(kBFloat16, true, false) == Row{2, 2, 12, 16});
}

TEST_CASE("any_non_finite finds inf or NaN in any of several tensors") {
  Tensor a = ones({3}), b = zeros({2, 2}), bad = ones({4});
  CHECK_FALSE(amp::any_non_finite({a, b, Tensor()}));
  bad.data_ptr<float>()[3] = std::numeric_limits<float>::infinity();
  CHECK(amp::any_non_finite({a, b, bad}));
  bad.data_ptr<float>()[3] = std::nanf("");
  CHECK(amp::any_non_finite({bad.to(kFloat16), a}));
  CHECK_FALSE(amp::any_non_finite({}));
}

TEST_CASE("masters step from the half gradients, no float32 copies: the same bits as from float32 copies") {
  // MasterWeights::step: the optimizer reads each half gradient times 1/scale and the clipping
  // coefficient, as the float32 copies grads_to_masters makes hold them; the result is the same to the
  // bit, for every optimizer (SGD and Adam in their kernels, the others from a copy one tensor at a time).
  for (DType half : {kFloat16, kBFloat16})
    for (const char* kind : {"sgd", "adamw", "adam", "adamw8bit", "adafactor"})
      for (double scale : {1.0, 1.0 / 1024})
        for (double clip : {0.0, 0.01}) {
          INFO(std::string(kind), ", scale ", scale, ", clip ", clip, ", ", half);
          auto run = [&](bool copies) {
            manual_seed(5);
            nn::Linear fc(300, 70);
            fc.to(half);
            amp::MasterWeights masters(fc.named_parameters());
            std::unique_ptr<optim::Optimizer> opt;
            const std::string k = kind;
            if (k == "sgd")
              opt = std::make_unique<optim::SGD>(masters.named_parameters(), optim::SGDOptions(0.1).momentum(0.9));
            if (k == "adamw") opt = std::make_unique<optim::AdamW>(masters.named_parameters());
            if (k == "adam")
              opt = std::make_unique<optim::Adam>(masters.named_parameters(), optim::AdamOptions().weight_decay(0.1));
            if (k == "adamw8bit") opt = std::make_unique<optim::AdamW8bit>(masters.named_parameters());
            if (k == "adafactor") opt = std::make_unique<optim::Adafactor>(masters.named_parameters());
            for (int step = 0; step < 3; ++step) {
              Tensor x = randn({9, 300}).to(half);
              (fc(x).to(kFloat32).pow(2.0).mean() * (1.0 / scale)).backward();
              if (copies) {
                masters.grads_to_masters(scale);
                if (clip > 0) optim::clip_grad_norm_(masters.parameters(), clip);
                opt->step();
                masters.masters_to_params();
              } else {
                masters.use_model_grads(scale);
                for (auto& m : masters.parameters()) CHECK(m.grad().dtype() == half);  // no copy
                if (clip > 0) masters.clip_grad_norm_(clip);
                masters.step(*opt);
              }
              fc.zero_grad();
            }
            std::vector<Tensor> r;
            for (auto& m : masters.parameters()) r.push_back(m.detach().clone());
            return r;
          };
          const std::vector<Tensor> a = run(true), b = run(false);
          for (size_t i = 0; i < a.size(); ++i) CHECK(equal(a[i], b[i]));
        }
}
