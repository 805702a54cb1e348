// Recompute-on-backward segments: same gradients as a plain run (bitwise on CPU, dropout
// included), fewer Activation bytes held after forward, and the corner cases of the API.
#include <doctest/doctest.h>

#include <cmath>

#include <memgrad/memgrad.h>

using namespace mg;

namespace {

struct Chain {
  std::vector<Tensor> w, b;
  explicit Chain(int layers, int64_t width = 24) {
    manual_seed(7);
    for (int i = 0; i < layers; ++i) {
      w.push_back((randn({width, width}) * (1.0 / std::sqrt(double(width)))).requires_grad_());
      b.push_back(zeros({width}).requires_grad_());
    }
  }
  Tensor layer(int i, const Tensor& x) const { return dropout(gelu(linear(x, w[size_t(i)], b[size_t(i)])), 0.1); }
  std::vector<std::function<Tensor(const Tensor&)>> stages() const {
    std::vector<std::function<Tensor(const Tensor&)>> s;
    for (int i = 0; i < int(w.size()); ++i) s.push_back([this, i](const Tensor& x) { return layer(i, x); });
    return s;
  }
  void zero() {
    for (auto& t : w) t.set_grad(Tensor());
    for (auto& t : b) t.set_grad(Tensor());
  }
  std::vector<std::vector<float>> grads() const {
    std::vector<std::vector<float>> g;
    for (auto& t : w) g.push_back(t.grad().to_vector<float>());
    for (auto& t : b) g.push_back(t.grad().to_vector<float>());
    return g;
  }
};

int64_t activation_bytes() { return memory_stats().category(Category::Activation); }

}  // namespace

TEST_CASE("checkpoint: gradients are bitwise identical, dropout included") {
  Chain c(6);
  Tensor x = randn({5, 24}).requires_grad_();
  manual_seed(11);
  Tensor plain = x;
  for (int i = 0; i < 6; ++i) plain = c.layer(i, plain);
  plain.sum().backward();
  auto ref = c.grads();
  auto ref_x = x.grad().to_vector<float>();

  for (int64_t segments : {1, 2, 3, 6}) {
    c.zero();
    x.set_grad(Tensor());
    manual_seed(11);
    Tensor y = checkpoint_sequential(c.stages(), segments, x);
    CHECK(equal(y, plain.detach()));
    y.sum().backward();
    CHECK(c.grads() == ref);
    CHECK(x.grad().to_vector<float>() == ref_x);
  }
}

TEST_CASE("checkpoint: only the segment's inputs and outputs stay alive after forward") {
  Chain c(4);
  Tensor x0 = randn({64, 24}).requires_grad_();
  Tensor x = x0 * 1.0;  // an op output: saved, it counts as Activation (a saved Input stays Input)
  int64_t before = activation_bytes();
  Tensor plain = x;
  for (int i = 0; i < 4; ++i) plain = c.layer(i, plain);
  int64_t plain_bytes = activation_bytes() - before;
  plain = Tensor();
  CHECK(activation_bytes() == before);

  Tensor y = checkpoint(
      [&](const Tensor& in) {
        Tensor h = in;
        for (int i = 0; i < 4; ++i) h = c.layer(i, h);
        return h;
      },
      x);
  // Only x is held (as the segment's input): 64 x 24 float32 = 6144 bytes, a multiple of 512.
  // (The plain run above saved x too; x itself is alive either way.)
  CHECK(activation_bytes() - before == 64 * 24 * 4);
  CHECK(plain_bytes > 4 * (activation_bytes() - before));
  y.sum().backward();
  y = Tensor();
  CHECK(activation_bytes() == before);
}

TEST_CASE("checkpoint: recomputed tensors are labelled and released as soon as used") {
  Chain c(3);
  Tensor x = randn({32, 24}).requires_grad_();
  Tensor y = checkpoint([&](const Tensor& in) { return c.layer(2, c.layer(1, c.layer(0, in))); }, x);
  bool saw_recompute = false;
  int64_t peak_recompute = 0;
  // A hook on x's gradient runs last: by then every recomputed tensor must be gone.
  x.register_hook([&](const Tensor&) {
    for (auto& [owner, bytes] : memory_by_owner())
      if (owner.rfind("recompute", 0) == 0) peak_recompute += bytes;
    return Tensor();
  });
  c.w[1].register_hook([&](const Tensor&) {
    for (auto& [owner, bytes] : memory_by_owner()) saw_recompute = saw_recompute || owner.rfind("recompute", 0) == 0;
    return Tensor();
  });
  y.sum().backward();
  CHECK(saw_recompute);
  CHECK(peak_recompute == 0);
}

TEST_CASE("checkpoint: several outputs, inputs without grad, nested segments") {
  manual_seed(3);
  Tensor a = randn({4, 6}).requires_grad_(), k = randn({4, 6});  // k needs no grad
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor s = tanh(in[0] * in[1]);
    return std::vector<Tensor>{s.exp(), (s * s).sum({1})};
  };
  auto plain = fn({a, k});
  (plain[0].sum() + plain[1].sum() * 2.0).backward();
  auto ref = a.grad().to_vector<float>();
  a.set_grad(Tensor());

  auto outs = checkpoint(fn, {a, k});
  (outs[0].sum() + outs[1].sum() * 2.0).backward();
  CHECK(a.grad().to_vector<float>() == ref);
  CHECK_FALSE(k.grad().defined());

  a.set_grad(Tensor());
  auto nested = checkpoint(
      [&](const std::vector<Tensor>& in) {
        auto inner = checkpoint(fn, in);
        return std::vector<Tensor>{inner[0] * 1.0, inner[1] * 1.0};
      },
      {a, k});
  (nested[0].sum() + nested[1].sum() * 2.0).backward();
  CHECK(a.grad().to_vector<float>() == ref);
}

TEST_CASE("checkpoint: retain_graph, accumulation and no_grad inside") {
  manual_seed(5);
  Tensor w = randn({8, 8}).requires_grad_();
  Tensor x = randn({3, 8});
  auto seg = [&](const Tensor& in) {
    Tensor frozen;
    {
      NoGradGuard ng;
      frozen = in * 2.0;  // no history inside the segment
    }
    return relu(matmul(frozen, w)).sigmoid();
  };
  Tensor ref_y = seg(x);
  ref_y.sum().backward();
  auto once = w.grad().to_vector<float>();
  w.set_grad(Tensor());

  Tensor y = checkpoint(seg, x);
  y.sum().backward({}, true);
  y.sum().backward();  // the graph was retained: gradients accumulate
  auto twice = w.grad().to_vector<float>();
  for (size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == doctest::Approx(2 * once[i]).epsilon(1e-6));
  CHECK_THROWS_AS(y.sum().backward(), AutogradError);  // sum() is a new node, but y's graph was released
}

TEST_CASE("checkpoint: a segment that computes differently when recomputed raises") {
  Tensor x = randn({4, 4}).requires_grad_();
  int calls = 0;
  Tensor y = checkpoint([&](const Tensor& in) { return (++calls == 1 ? in : in.narrow(0, 0, 2)).exp().sum(); }, x);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("deterministic"), AutogradError);
  Tensor ok = (x * 2.0).sum();  // the library keeps working
  ok.backward();
  CHECK(x.grad().defined());
}

TEST_CASE("checkpoint: a policy keeps matmul inputs and recomputes the rest, same gradients") {
  Chain c(3);
  Tensor x = randn({16, 24}).requires_grad_();  // user input: stays Input when saved
  manual_seed(9);
  Tensor plain = c.layer(2, c.layer(1, c.layer(0, x)));
  plain.sum().backward();
  auto ref = c.grads();
  c.zero();

  int64_t before = activation_bytes();
  manual_seed(9);
  Tensor all = checkpoint([&](const Tensor& in) { return c.layer(2, c.layer(1, c.layer(0, in))); }, x);
  int64_t held_all = activation_bytes() - before;
  all = Tensor();
  manual_seed(9);
  Tensor kept = checkpoint([&](const Tensor& in) { return c.layer(2, c.layer(1, c.layer(0, in))); }, x,
                           CheckpointPolicy::keep_matmuls());
  int64_t held_kept = activation_bytes() - before;
  CHECK(held_kept > held_all);
  kept.sum().backward();
  CHECK(c.grads() == ref);
}

TEST_CASE("checkpoint: recompute replays the draws of every generator, the user's own included") {
  GeneratorStateGuard restore;
  Tensor x = randn({8, 32}).requires_grad_(), w = randn({32, 32}).requires_grad_();
  auto segment = [&](Generator* g) {
    return [&w, g](const Tensor& in) {
      Tensor h = dropout(matmul(in, w).tanh(), 0.4, true, g);
      return dropout(h, 0.3) * rand({8, 32}, {}, g);  // the default generator and the user's, interleaved
    };
  };
  for (bool own : {false, true}) {
    CAPTURE(own);
    Generator mine(11);
    manual_seed(4);
    segment(own ? &mine : nullptr)(x).sum().backward();
    Tensor gx = x.grad().clone(), gw = w.grad().clone();
    x.set_grad(Tensor()), w.set_grad(Tensor());
    mine.manual_seed(11);
    manual_seed(4);
    Tensor y = checkpoint(segment(own ? &mine : nullptr), x);
    uint64_t after_forward = mine.offset(), default_after = default_generator().offset();
    y.sum().backward();  // the recompute draws nothing new: it replays the first run's draws
    CHECK(mine.offset() == after_forward);
    CHECK(default_generator().offset() == default_after);
    CHECK(x.grad().to_vector<float>() == gx.to_vector<float>());
    CHECK(w.grad().to_vector<float>() == gw.to_vector<float>());
    x.set_grad(Tensor()), w.set_grad(Tensor());
  }
}

TEST_CASE("checkpoint: policies and nodes name ops by typed identity") {
  Tensor a = randn({3, 4}).requires_grad_(), b = randn({4, 5}).requires_grad_();
  Tensor y = matmul(a, b);
  CHECK(y.grad_fn()->op() == Op::matmul);
  CHECK(y.grad_fn()->name() == "matmul");
  CHECK(std::string(op_name(Op::masked_fill_)) == "masked_fill_");
  CHECK(CheckpointPolicy::keep_matmuls().keep(Op::linear));
  CHECK_FALSE(CheckpointPolicy::keep_matmuls().keep(Op::softmax));
}
