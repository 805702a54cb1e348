// The fused element-wise chains of the GPT block (scaled_masked_softmax, add_layer_norm,
// bias_dropout_add) against the single ops they replace: the same values bit for bit (forward,
// gradients within a few ulp where backward sums in another order), the same dropout masks, and
// the bytes each books, as integers from the shapes, on the cpu and on meta.
#include <doctest/doctest.h>

#include <cmath>

#include <memgrad/memgrad.h>

#include "gpt_step.h"

using namespace mg;

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  return (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>();
}

// softmax(scale * x + mask) from the single ops, as the unfused GPT and attention compose it.
Tensor composed_softmax(const Tensor& x, double scale, const Tensor& mask, bool causal) {
  Tensor s = x * scale;
  const int64_t Tq = x.size(-2), Tk = x.size(-1);
  if (causal) s = masked_fill(s, triu(ones({Tq, Tk}, kBool), 1), -INFINITY);
  if (mask.defined()) s = mask.dtype() == kBool ? masked_fill(s, eq(mask, Scalar(false)), -INFINITY) : s + mask;
  return softmax(s, -1);
}

// Bytes of n elements of dtype t.
int64_t bytes(int64_t n, DType t = kFloat32) { return n * int64_t(dtype_size(t)); }

}  // namespace

TEST_CASE("scaled_masked_softmax: the composed ops' values bit for bit, and their gradients") {
  manual_seed(21);
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(dt);
    Tensor x = randn({2, 3, 37, 37}).to(dt), up = randn({2, 3, 37, 37}).to(dt);
    Tensor u = rand({37, 37});
    u.select(1, 0).fill_(1.0);  // every query sees key 0
    Tensor bmask = gt(u, 0.3), amask = (randn({3, 1, 37}) * 2.0).to(dt);
    struct Case {
      Tensor mask;
      bool causal;
    };
    for (const Case& c : {Case{{}, true}, Case{{}, false}, Case{bmask, false}, Case{amask, false}}) {
      CAPTURE(c.causal);
      CAPTURE(c.mask.defined());
      Tensor m1 = c.mask.defined() && c.mask.dtype() != kBool ? c.mask.clone().requires_grad_(true) : c.mask;
      Tensor m2 = m1.defined() && m1.requires_grad() ? c.mask.clone().requires_grad_(true) : c.mask;
      Tensor x1 = x.clone().requires_grad_(true), x2 = x.clone().requires_grad_(true);
      Tensor fused = scaled_masked_softmax(x1, 0.3, m1, c.causal), ref = composed_softmax(x2, 0.3, m2, c.causal);
      CHECK(max_diff(fused, ref) == 0);
      (fused * up).sum().backward();
      (ref * up).sum().backward();
      CHECK(max_diff(x1.grad(), x2.grad()) == 0);
      if (m1.defined() && m1.requires_grad()) CHECK(max_diff(m1.grad(), m2.grad()) == 0);
    }
  }
  // Causal rows past the kernel's first 256-key sum block (it fills the keys past the block of a
  // row's first hidden key instead of computing them): still bit for bit, and where a row's every
  // seen score is -inf, NaN over the whole row as the composed ops give.
  for (DType dt : {kFloat32, kBFloat16}) {
    CAPTURE(dt);
    Tensor x = randn({2, 600, 600}).to(dt), up = randn({2, 600, 600}).to(dt);
    x.select(1, 0).select(1, 0).fill_(-INFINITY);  // row 0 sees key 0 only
    Tensor x1 = x.clone().requires_grad_(true), x2 = x.clone().requires_grad_(true);
    Tensor fused = scaled_masked_softmax(x1, 0.3, {}, true), ref = composed_softmax(x2, 0.3, {}, true);
    Tensor nan1 = ne(fused, fused), nan2 = ne(ref, ref);
    auto count = [](const Tensor& t) { return t.to(kFloat64).sum().item<double>(); };
    CHECK(count(nan2.select(1, 0)) == 2 * 600);
    CHECK(count(ne(nan1, nan2)) == 0);
    CHECK(max_diff(masked_fill(fused, nan1, 0.0), masked_fill(ref, nan2, 0.0)) == 0);
    (masked_fill(fused, nan1, 0.0) * up).sum().backward();
    (masked_fill(ref, nan2, 0.0) * up).sum().backward();
    Tensor g1 = x1.grad().narrow(1, 1, 599), g2 = x2.grad().narrow(1, 1, 599);  // row 0's gradient is NaN
    CHECK(max_diff(g1, g2) == 0);
  }
  auto r = gradcheck([](const std::vector<Tensor>& t) { return scaled_masked_softmax(t[0], 0.7, t[1]); },
                     {randn({2, 5, 6}, kFloat64).requires_grad_(true), randn({5, 6}, kFloat64).requires_grad_(true)});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("scaled_masked_softmax: a float32 row's sum in SIMD lanes stays within 1e-6 of float64") {
  manual_seed(22);
  Tensor x = randn({3, 1, 70000}) * 4.0;  // rows past the kernel's 256-element blocks
  Tensor got = scaled_masked_softmax(x, 0.5), want = scaled_masked_softmax(x.to(kFloat64), 0.5);
  CHECK(max_diff(got, want) < 1e-6 * want.abs().max().item<double>() + 1e-12);
  CHECK((got.sum({-1}).to(kFloat64) - 1.0).abs().max().item<double>() < 1e-5);
}

TEST_CASE("scaled_masked_softmax: books its output only; the composition holds two more score matrices") {
  const int64_t B = 2, H = 4, T = 64, N = B * H * T * T;
  for (const Device& dev : {kCPU, kMeta}) {
    CAPTURE(dev);
    Tensor x = randn({B, H, T, T}, TensorOptions().device(dev)).requires_grad_(true);
    for (bool fused : {true, false}) {
      CAPTURE(fused);
      reset_peak(dev);
      const MemoryStats before = memory_stats(dev);
      Tensor y =
          fused
              ? scaled_masked_softmax(x, 0.125, {}, true)
              : softmax(masked_fill(x * 0.125, triu(ones({T, T}, TensorOptions(kBool).device(dev)), 1), -INFINITY), -1);
      const MemoryStats after = memory_stats(dev);
      // both save the probabilities, the composition also its bool mask [T, T] (masked_fill's where
      // keeps it); the fused op allocates nothing else, even briefly
      CHECK(after.category(Category::Activation) - before.category(Category::Activation) ==
            bytes(N) + (fused ? 0 : bytes(T * T, kBool)));
      if (fused) CHECK(after.peak_allocated - before.allocated == bytes(N));
      // the composition: scale * x and the masked scores live together with the mask while the
      // softmax runs (plus the bool mask [T, T] and the -inf scalar)
      if (!fused) CHECK(after.peak_allocated - before.allocated >= 3 * bytes(N));
    }
  }
}

TEST_CASE("add_layer_norm: (x + r, layer_norm(x + r)) bit for bit, gradients, and the bytes") {
  manual_seed(23);
  for (DType dt : {kFloat32, kFloat64, kFloat16}) {
    CAPTURE(dt);
    Tensor x = randn({4, 9, 48}).to(dt), r = randn({4, 9, 48}).to(dt), w = randn({48}).to(dt), b = randn({48}).to(dt);
    Tensor up1 = randn({4, 9, 48}).to(dt), up2 = randn({4, 9, 48}).to(dt);
    std::vector<Tensor> leaves[2];
    Tensor out[2][2];
    for (int f = 0; f < 2; ++f) {
      for (const Tensor& t : {x, r, w, b}) leaves[f].push_back(t.clone().requires_grad_(true));
      auto& l = leaves[f];
      if (f == 0) {
        auto [s, y] = add_layer_norm(l[0], l[1], {48}, l[2], l[3]);
        out[f][0] = s, out[f][1] = y;
      } else {
        out[f][0] = l[0] + l[1];
        out[f][1] = layer_norm(out[f][0], {48}, l[2], l[3]);
      }
      ((out[f][0] * up1).sum() + (out[f][1] * up2).sum()).backward();
    }
    CHECK(max_diff(out[0][0], out[1][0]) == 0);
    CHECK(max_diff(out[0][1], out[1][1]) == 0);
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(max_diff(leaves[0][i].grad(), leaves[1][i].grad()) == 0);
    }
  }
  auto r = gradcheck(
      [](const std::vector<Tensor>& t) {
        auto [s, y] = add_layer_norm(t[0], t[1], {6}, t[2], t[3]);
        return s * 0.5 + y;
      },
      {randn({3, 6}, kFloat64).requires_grad_(true), randn({3, 6}, kFloat64).requires_grad_(true),
       randn({6}, kFloat64).requires_grad_(true), randn({6}, kFloat64).requires_grad_(true)});
  CHECK_MESSAGE(r.ok, r.message);
  // The bytes: the sum and the output, and mean and rstd per row (float32); backward keeps the
  // sum, mean and rstd, as layer_norm(x + r) does.
  const int64_t rows = 256, n = 128;
  for (const Device& dev : {kCPU, kMeta}) {
    CAPTURE(dev);
    Tensor a = randn({rows, n}, TensorOptions().device(dev)).requires_grad_(true), c = randn({rows, n}, dev);
    for (bool fused : {true, false}) {
      CAPTURE(fused);
      reset_peak(dev);
      const MemoryStats before = memory_stats(dev);
      Tensor s, y;
      if (fused) {
        auto [s1, y1] = add_layer_norm(a, c, {n});
        s = s1, y = y1;
      } else {
        s = a + c;
        y = layer_norm(s, {n});
      }
      const MemoryStats after = memory_stats(dev);
      CHECK(after.category(Category::Activation) - before.category(Category::Activation) ==
            bytes(rows * n) + 2 * bytes(rows));
      CHECK(after.peak_allocated - before.allocated == 2 * bytes(rows * n) + 2 * bytes(rows));
    }
  }
}

TEST_CASE("bias_dropout_add: r + dropout(x + b) bit for bit, the same mask and generator offset") {
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    for (double p : {0.0, 0.3, 1.0}) {
      CAPTURE(dt);
      CAPTURE(p);
      manual_seed(24);
      Tensor x = randn({5, 7, 33}).to(dt), b = randn({33}).to(dt), r = randn({5, 7, 33}).to(dt);
      Tensor up = randn({5, 7, 33}).to(dt);
      Tensor out[2], grads[2][3];
      uint64_t offsets[2];
      for (int f = 0; f < 2; ++f) {
        manual_seed(99);
        Tensor x1 = x.clone().requires_grad_(true), b1 = b.clone().requires_grad_(true),
               r1 = r.clone().requires_grad_(true);
        out[f] = f == 0 ? bias_dropout_add(x1, b1, r1, p) : r1 + dropout(x1 + b1, p);
        offsets[f] = default_generator().offset();
        (out[f] * up).sum().backward();
        grads[f][0] = x1.grad(), grads[f][1] = b1.grad(), grads[f][2] = r1.grad();
      }
      CHECK(offsets[0] == offsets[1]);
      CHECK(max_diff(out[0], out[1]) == 0);
      for (int i = 0; i < 3; ++i) CHECK(max_diff(grads[0][i], grads[1][i]) == 0);
    }
  }
  manual_seed(25);
  auto r = gradcheck(
      [](const std::vector<Tensor>& t) {
        GeneratorStateGuard same_mask;  // every evaluation draws the same mask
        return bias_dropout_add(t[0], t[1], t[2], 0.4);
      },
      {randn({4, 6}, kFloat64).requires_grad_(true), randn({6}, kFloat64).requires_grad_(true),
       randn({4, 6}, kFloat64).requires_grad_(true)});
  CHECK_MESSAGE(r.ok, r.message);
  // Bytes: the fused op allocates its output and saves nothing; the composition holds x + b, its
  // dropout and the sum at once (the full expression's temporaries), and saves nothing either.
  const int64_t N = 512 * 64;
  for (const Device& dev : {kCPU, kMeta}) {
    CAPTURE(dev);
    Tensor x = randn({512, 64}, TensorOptions().device(dev)).requires_grad_(true), b = randn({64}, dev),
           rs = randn({512, 64}, dev);
    for (bool fused : {true, false}) {
      CAPTURE(fused);
      reset_peak(dev);
      const MemoryStats before = memory_stats(dev);
      Tensor y = fused ? bias_dropout_add(x, b, rs, 0.1) : rs + dropout(x + b, 0.1);
      const MemoryStats after = memory_stats(dev);
      CHECK(after.category(Category::Activation) == before.category(Category::Activation));
      CHECK(after.peak_allocated - before.allocated == (fused ? 1 : 3) * bytes(N));
    }
  }
}

TEST_CASE("fused chains: wrong shapes and dtypes say what was expected") {
  Tensor x = randn({2, 3, 4});
  CHECK_THROWS_AS(scaled_masked_softmax(randn({4}), 1.0), ShapeError);
  CHECK_THROWS_AS(scaled_masked_softmax(x, 1.0, randn({5, 4})), ShapeError);
  CHECK_THROWS_AS(scaled_masked_softmax(x, 1.0, randn({3, 4}, kFloat64)), DTypeError);
  CHECK_THROWS_AS(scaled_masked_softmax(x, 1.0, gt(randn({3, 4}), 0.0), true), ValueError);
  CHECK_THROWS_AS(add_layer_norm(x, randn({2, 3, 5}), {4}), ShapeError);
  CHECK_THROWS_AS(add_layer_norm(x, randn({2, 3, 4}, kFloat64), {4}), DTypeError);
  CHECK_THROWS_AS(add_layer_norm(x, x, {3}), ShapeError);
  CHECK_THROWS_AS(bias_dropout_add(x, randn({3}), x, 0.1), ShapeError);
  CHECK_THROWS_AS(bias_dropout_add(x, randn({4}), randn({3, 4}), 0.1), ShapeError);
  CHECK_THROWS_AS(bias_dropout_add(x, randn({4}), x, 1.5), ValueError);
  CHECK(memory_stats().allocated >= 0);
}

TEST_CASE("fused chains: the GPT with fused_elementwise gives the unfused GPT's loss, gradients and masks") {
  auto step = [](bool fused, double dropout, int64_t checkpoint_every) {
    return gpt_step([&](nn::GPTConfig& c) {
      c.dropout = dropout;
      c.fused_elementwise = fused;
      c.checkpoint_every = checkpoint_every;
    });
  };
  for (double dropout : {0.0, 0.2}) {
    CAPTURE(dropout);
    auto [loss_f, params_f, saved_f, peak_f] = step(true, dropout, 0);
    auto [loss_c, params_c, saved_c, peak_c] = step(false, dropout, 0);
    auto [loss_k, params_k, saved_k, peak_k] = step(true, dropout, 1);  // recomputed blocks: the same masks
    CHECK(loss_f == loss_c);
    CHECK(loss_k == loss_f);
    REQUIRE(params_f.size() == params_c.size());
    for (size_t i = 0; i < params_c.size(); ++i) {
      CAPTURE(params_c[i].first);
      const Tensor& g = params_c[i].second.grad();
      CHECK(max_diff(params_f[i].second.grad(), g) <= 1e-6 * (1 + g.abs().max().item<double>()));
      CHECK(max_diff(params_k[i].second.grad(), params_f[i].second.grad()) == 0);
    }
    // The same bytes saved (the causal mask is a buffer; the scores' short-lived copies are not
    // at this model's peak, which the logits set).
    CHECK(saved_f == saved_c);
    CHECK(peak_f <= peak_c);
    CHECK(peak_k < peak_f);
  }
}
