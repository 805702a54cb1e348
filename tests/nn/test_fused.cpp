// The fused ops against the same math composed from single ops. Attention: against matmul,
// masked_fill, softmax and dropout (float64, to 1e-10), finite differences, half precision, the
// bytes it saves, and GPT with fused attention against GPT without. bias_gelu: against
// gelu(x + bias), finite differences, and the MLP that uses it.
#include <doctest/doctest.h>

#include <cmath>
#include <utility>

#include <memgrad/memgrad.h>

#include "gpt_step.h"

using namespace mg;

namespace {

// The textbook attention, op by op: keeps the [.., Tq, Tk] scores and probabilities.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p) {
  const int64_t Tq = q.size(-2), Tk = k.size(-2);
  Tensor att = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(-1))));
  if (causal) att = masked_fill(att, triu(ones({Tq, Tk}, kBool), 1), -INFINITY);
  return matmul(dropout(softmax(att, -1), dropout_p), v);
}

struct Inputs {
  Tensor q, k, v, grad;
};
Inputs make_inputs(const Shape& lead, int64_t Tq, int64_t Tk, int64_t D, DType dtype = kFloat64) {
  GeneratorStateGuard keep_rng;
  manual_seed(7);
  auto shape = [&](int64_t T) {
    Shape s = lead;
    s.push_back(T);
    s.push_back(D);
    return s;
  };
  return {randn(shape(Tq)).to(dtype), randn(shape(Tk)).to(dtype), randn(shape(Tk)).to(dtype),
          randn(shape(Tq)).to(dtype)};
}

// Output and the gradients of q, k, v for upstream gradient in.grad, starting from RNG state `seed`.
std::vector<Tensor> run(const Inputs& in, bool fused, bool causal, double p, uint64_t seed = 11) {
  manual_seed(seed);
  Tensor q = in.q.clone().requires_grad_(true), k = in.k.clone().requires_grad_(true),
         v = in.v.clone().requires_grad_(true);
  Tensor out = fused ? scaled_dot_product_attention(q, k, v, {}, p, causal) : composed(q, k, v, causal, p);
  (out * in.grad).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

double max_diff(const Tensor& a, const Tensor& b) {
  return (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>();
}

}  // namespace

std::tuple<double, std::vector<std::pair<std::string, Tensor>>, int64_t, int64_t> gpt_step(
    const std::function<void(nn::GPTConfig&)>& configure) {
  manual_seed(3);
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 32, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  configure(c);
  nn::GPT gpt(c);
  Tensor idx = randint(0, 64, {3, 32}), target = randint(0, 64, {3, 32});
  reset_peak(kCPU);
  const int64_t base = memory_stats().allocated;
  Tensor loss = gpt.loss(idx, target);
  const int64_t saved = memory_stats().category(Category::Activation);
  loss.backward();
  return {loss.item<double>(), gpt.named_parameters(), saved, memory_stats().peak_allocated - base};
}

namespace {}  // namespace

TEST_CASE("attention: fused equals composed, forward and backward, causal or not, dropout or not") {
  struct Case {
    Shape lead;
    int64_t Tq, Tk, D;
    bool causal;
    double p;
  };
  // 70 and 130 query rows cross the CPU kernel's 64-row blocks; Tq != Tk; a head dim of 1.
  for (const Case& c :
       {Case{{2, 3}, 70, 70, 16, true, 0.0}, Case{{2, 3}, 70, 70, 16, false, 0.0}, Case{{1, 2}, 130, 45, 8, false, 0.0},
        Case{{1, 2}, 45, 130, 8, true, 0.0}, Case{{4}, 9, 9, 1, true, 0.0}, Case{{2, 2}, 67, 67, 12, true, 0.3},
        Case{{3}, 20, 33, 5, false, 0.5}}) {
    CAPTURE(c.Tq);
    CAPTURE(c.Tk);
    CAPTURE(c.causal);
    CAPTURE(c.p);
    Inputs in = make_inputs(c.lead, c.Tq, c.Tk, c.D);
    auto fused = run(in, true, c.causal, c.p), ref = run(in, false, c.causal, c.p);
    for (size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);
      CHECK(fused[i].shape() == ref[i].shape());
      CHECK(max_diff(fused[i], ref[i]) < 1e-10);
    }
  }
}

TEST_CASE("attention: dropout draws the dropout op's mask, and backward reuses it") {
  Inputs in = make_inputs({2, 2}, 24, 24, 8);
  auto a = run(in, true, true, 0.4, 5), b = run(in, true, true, 0.4, 5), c = run(in, true, true, 0.4, 6);
  CHECK(max_diff(a[0], b[0]) == 0);  // same generator state, same mask
  CHECK(max_diff(a[0], c[0]) > 0.1);
  // About p of the probabilities are dropped: with p = 0.4 the output differs from p = 0.
  auto none = run(in, true, true, 0.0);
  CHECK(max_diff(a[0], none[0]) > 0.1);
}

TEST_CASE("attention: gradients agree with finite differences in float64") {
  Inputs in = make_inputs({2}, 7, 5, 3);
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    auto fn = [causal](const std::vector<Tensor>& x) {
      return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, causal);
    };
    auto r = gradcheck(fn, {in.q.requires_grad_(true), in.k.requires_grad_(true), in.v.requires_grad_(true)});
    CHECK_MESSAGE(r.ok, r.message);
  }
  // Non-contiguous inputs (heads taken out of [B, T, H, D]) and an explicit scale.
  Tensor x = make_inputs({2, 6}, 3, 3, 4).q;  // [2, 6, 3, 4] seen as [2, 3, 6, 4]
  auto fn = [](const std::vector<Tensor>& t) {
    Tensor h = t[0].transpose(1, 2);
    return scaled_dot_product_attention(h, h * 0.5, h + 1.0, {}, 0.0, true, 0.7);
  };
  auto r = gradcheck(fn, {x.requires_grad_(true)});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("attention: float32, float16 and bfloat16 against float64") {
  Inputs ref_in = make_inputs({2, 2}, 66, 66, 32);
  auto ref = run(ref_in, true, true, 0.0);
  for (auto [dtype, tol] : {std::pair{kFloat32, 1e-4}, std::pair{kFloat16, 2e-2}, std::pair{kBFloat16, 1e-1}}) {
    CAPTURE(dtype);
    Inputs in{ref_in.q.to(dtype), ref_in.k.to(dtype), ref_in.v.to(dtype), ref_in.grad.to(dtype)};
    auto got = run(in, true, true, 0.0);
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i].dtype() == dtype);
      CHECK(max_diff(got[i], ref[i]) < tol * (1 + ref[i].abs().max().item<double>()));
    }
  }
}

TEST_CASE("attention: saves q, k, v, the output and one log-sum-exp per row, never a [Tq, Tk] matrix") {
  const int64_t B = 2, H = 4, T = 256, D = 16, F = 4;
  for (const Device& dev : {kCPU, kMeta}) {
    CAPTURE(dev);
    Tensor x = randn({B, T, 3 * H * D}, TensorOptions().device(dev)).requires_grad_(true);
    auto qkv = split(x, H * D, 2);
    auto heads = [&](const Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
    reset_peak(dev);
    MemoryStats before = memory_stats(dev);
    Tensor out = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {}, 0.0, true);
    MemoryStats after = memory_stats(dev);
    const int64_t head_bytes = B * H * T * D * F, lse = B * H * T * F;
    // q, k and v were made contiguous (and saved), the output is saved, plus lse.
    CHECK(after.category(Category::Activation) - before.category(Category::Activation) == 4 * head_bytes + lse);
    CHECK(after.peak_allocated - before.allocated == 4 * head_bytes + lse);  // nothing else, even briefly
    CHECK(B * H * T * T * F > 4 * head_bytes + lse);                         // one [T, T] matrix would dominate
    // Backward: the gradients of q, k, v and delta (B*H*T floats, Workspace) on top.
    reset_peak(dev);
    out.sum().backward();
    CHECK(x.grad().shape() == x.shape());
  }
}

TEST_CASE("attention: the meta device books what the cpu books") {
  auto step = [](const Device& dev) {
    Tensor q = randn({2, 3, 40, 8}, TensorOptions().device(dev)).requires_grad_(true);
    reset_peak(dev);
    int64_t base = memory_stats(dev).allocated;
    Tensor o = scaled_dot_product_attention(q, q * 2.0, q + 1.0, {}, 0.1, true);
    o.sum().backward();
    return std::pair{memory_stats(dev).peak_allocated - base, memory_stats(dev).allocated - base};
  };
  CHECK(step(kCPU) == step(kMeta));
}

TEST_CASE("attention: wrong shapes, dtypes and probabilities say what was expected") {
  Tensor q = randn({2, 5, 4}), k = randn({2, 6, 4});
  CHECK_THROWS_AS(scaled_dot_product_attention(q, randn({2, 6, 3}), randn({2, 6, 3})), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, randn({2, 7, 4})), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, randn({3, 6, 4}), randn({3, 6, 4})), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(randn({4}), randn({4}), randn({4})), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k.to(kFloat64), k), DTypeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q.to(kInt64), k.to(kInt64), k.to(kInt64)), DTypeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, k, {}, 1.0), ValueError);
  try {
    scaled_dot_product_attention(q, randn({2, 6, 3}), randn({2, 6, 3}));
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("q [2, 5, 4]") != std::string::npos);
  }
  CHECK_THROWS_AS(scaled_dot_product_attention(randn({2, 5, 0}), randn({2, 6, 0}), randn({2, 6, 0})), ShapeError);
  CHECK(scaled_dot_product_attention(q, k, k).shape() == q.shape());  // still usable
}

// ---- libtorch's signature: masks, broadcast leading dims, no implicit conversions

namespace {
// Whether scaled_dot_product_attention can be called with arguments of these types.
template <class... A>
constexpr auto sdpa_compiles(int) -> decltype(scaled_dot_product_attention(std::declval<A>()...), true) {
  return true;
}
template <class... A>
constexpr bool sdpa_compiles(...) {
  return false;
}
static_assert(sdpa_compiles<Tensor, Tensor, Tensor>(0));
static_assert(sdpa_compiles<Tensor, Tensor, Tensor, Tensor, double, bool>(0));
static_assert(sdpa_compiles<Tensor, Tensor, Tensor, Tensor, double, bool, double>(0));
static_assert(sdpa_compiles<Tensor, Tensor, Tensor, Tensor, int>(0));    // dropout_p 0
static_assert(!sdpa_compiles<Tensor, Tensor, Tensor, double>(0));        // sdpa(q, k, v, 0.1): no mask is a double
static_assert(!sdpa_compiles<Tensor, Tensor, Tensor, bool, double>(0));  // the old (is_causal, dropout_p) order
static_assert(!sdpa_compiles<Tensor, Tensor, Tensor, Tensor, bool>(0));  // a bool dropout_p
static_assert(!sdpa_compiles<Tensor, Tensor, Tensor, Tensor, double, double>(0));  // a double is_causal
static_assert(!sdpa_compiles<Tensor, Tensor, Tensor, Tensor, double, int>(0));

// Attention written out: q k^T * scale, the mask (false or -inf hides a key), softmax (a row that
// sees no key reads 0), dropout, @ v; q, k, v and the mask broadcast as matmul and where do.
Tensor masked_composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double p) {
  Tensor s = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(-1))));
  if (mask.dtype() == kBool)
    s = where(mask, s, full({}, -INFINITY, kFloat64));
  else
    s = s + mask;
  Tensor sees = gt(amax(s.detach(), {-1}, true), Scalar(-INFINITY)), zero = zeros({}, kFloat64);
  Tensor probs = where(sees, softmax(where(sees, s, zero), -1), zero);
  return matmul(dropout(probs.contiguous(), p), v);
}
}  // namespace

TEST_CASE("attention: bool and additive masks, broadcast leading dims, against the composed math") {
  GeneratorStateGuard keep_rng;
  manual_seed(41);
  const int64_t B = 2, H = 3, Tq = 70, Tk = 45, D = 8;
  Tensor keep = rand({B, 1, Tq, Tk}) > 0.3;             // per batch, shared by the heads
  keep.select(0, 1).select(0, 0).select(0, 5).zero_();  // a query that sees no key
  Tensor add = randn({H, Tq, Tk});                      // per head, shared by the batch
  add.masked_fill_(rand({H, Tq, Tk}) < 0.2, -INFINITY);
  add.select(0, 2).select(0, 9).fill_(-INFINITY);
  struct Case {
    const char* name;
    Shape kv;  // k and v's leading dims (q's are [B, H])
    Tensor mask;
    double p;
  };
  for (const Case& c :
       {Case{"bool mask", {B, H}, keep, 0.0}, Case{"bool mask, k and v shared by heads", {B, 1}, keep, 0.0},
        Case{"additive mask", {B, H}, add.to(kFloat64), 0.0},
        Case{"additive mask, one k and v for all", {1, 1}, add.to(kFloat64), 0.0},
        Case{"bool [Tq, Tk] mask and dropout", {B, H}, keep.select(0, 0).select(0, 0), 0.3}}) {
    CAPTURE(c.name);
    Tensor q = randn({B, H, Tq, D}, kFloat64).requires_grad_(), up = randn({B, H, Tq, D}, kFloat64);
    Shape kvs = c.kv;
    kvs.insert(kvs.end(), {Tk, D});
    Tensor k = randn(kvs, kFloat64).requires_grad_(), v = randn(kvs, kFloat64).requires_grad_();
    auto run = [&](bool fused) {
      manual_seed(5);
      for (Tensor t : {q, k, v}) t.set_grad(Tensor());
      Tensor out = fused ? scaled_dot_product_attention(q, k, v, c.mask, c.p) : masked_composed(q, k, v, c.mask, c.p);
      (out * up).sum().backward();
      return std::vector<Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
    };
    auto fused = run(true), ref = run(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);
      CHECK(fused[i].shape() == ref[i].shape());
      CHECK(max_diff(fused[i], ref[i]) < 1e-10);
    }
    if (c.mask.dtype() == kBool && c.p == 0) {  // the query that sees nothing reads zeros
      CHECK(fused[0].select(0, 1).select(1, 5).abs().max().item<double>() == 0);
    }
  }
}

TEST_CASE("attention: an additive mask that requires grad gets its gradient") {
  Tensor q = randn({2, 4, 3}, kFloat64), k = randn({2, 5, 3}, kFloat64), v = randn({2, 5, 3}, kFloat64);
  Tensor bias = randn({4, 5}, kFloat64);  // an ALiBi-like learned bias shared by the batch
  auto fn = [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]); };
  auto r = gradcheck(fn, {q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), bias.requires_grad_()});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("attention: with a mask, the kernels save the mask itself and nothing of [Tq, Tk] more") {
  const int64_t B = 2, H = 4, T = 128, D = 16, F = 4;
  for (const Device& dev : {kCPU, kMeta}) {
    CAPTURE(dev);
    Tensor q = randn({B, H, T, D}, TensorOptions().device(dev)).requires_grad_(true);
    Tensor mask = ones({T, T}, TensorOptions(kBool).device(dev));
    MemoryStats before = memory_stats(dev);
    reset_peak(dev);
    Tensor out = scaled_dot_product_attention(q, q, q, mask);
    MemoryStats after = memory_stats(dev);
    const int64_t head_bytes = B * H * T * D * F, lse = B * H * T * F;
    // The output and lse are new and saved; q (saved as q, k and v) and the mask are inputs the op
    // keeps without copying (they stay Input).
    CHECK(after.category(Category::Activation) - before.category(Category::Activation) == head_bytes + lse);
    CHECK(after.peak_allocated - before.allocated == head_bytes + lse);
  }
}

TEST_CASE("attention: mask errors say what was expected") {
  Tensor q = randn({2, 5, 4}), k = randn({2, 6, 4});
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, k, ones({5, 6}, kBool), 0.0, true), ValueError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, k, ones({5, 6}, kInt64)), DTypeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, k, ones({5, 6}, kFloat64)), DTypeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, k, ones({5, 7}, kBool)), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, randn({2, 6, 5})), ShapeError);  // Dv != D
  try {
    scaled_dot_product_attention(q, k, k, ones({3, 5, 6}, kBool));
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("broadcasts to [2, 5, 6]") != std::string::npos);
  }
}

TEST_CASE("attention: no queries or no keys") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    // No queries: an empty output, and zero gradients for k and v.
    Tensor q = randn({2, 3, 0, 8}).requires_grad_(true), k = randn({2, 3, 5, 8}).requires_grad_(true);
    Tensor out = scaled_dot_product_attention(q, k, k, {}, 0.0, causal);
    CHECK(out.shape() == Shape{2, 3, 0, 8});
    out.sum().backward();
    CHECK(k.grad().abs().sum().item<double>() == 0);
    // No keys: every row attends to nothing and reads 0.
    Tensor q2 = randn({2, 3, 4, 8}).requires_grad_(true), k2 = randn({2, 3, 0, 8});
    Tensor out2 = scaled_dot_product_attention(q2, k2, k2, {}, 0.0, causal);
    CHECK(out2.shape() == Shape{2, 3, 4, 8});
    CHECK(out2.abs().sum().item<double>() == 0);
    out2.sum().backward();
    CHECK(q2.grad().abs().sum().item<double>() == 0);
  }
}

TEST_CASE("attention: GPT with fused attention matches GPT without, and saves less") {
  auto step = [](bool fused, double dropout) {
    return gpt_step([&](nn::GPTConfig& c) {
      c.dropout = dropout;
      c.fused_attention = fused;
    });
  };
  for (double dropout : {0.0, 0.2}) {
    CAPTURE(dropout);
    auto [loss_f, params_f, saved_f, peak_f] = step(true, dropout);
    auto [loss_c, params_c, saved_c, peak_c] = step(false, dropout);
    CHECK(loss_f == doctest::Approx(loss_c).epsilon(1e-5));
    REQUIRE(params_f.size() == params_c.size());
    for (size_t i = 0; i < params_c.size(); ++i) {
      CAPTURE(params_c[i].first);
      CHECK(max_diff(params_f[i].second.grad(), params_c[i].second.grad()) < 1e-4);
    }
    CHECK(saved_f < saved_c);
    CHECK(peak_f < peak_c);
  }
}

TEST_CASE("bias_gelu: equals gelu(x + bias), forward and backward, both approximations") {
  manual_seed(9);
  Tensor x = randn({3, 5, 7}, kFloat64), b = randn({7}, kFloat64), up = randn({3, 5, 7}, kFloat64);
  for (GeluApprox approx : {GeluApprox::None, GeluApprox::Tanh}) {
    Tensor x1 = x.clone().requires_grad_(true), b1 = b.clone().requires_grad_(true);
    Tensor x2 = x.clone().requires_grad_(true), b2 = b.clone().requires_grad_(true);
    Tensor fused = bias_gelu(x1, b1, approx), ref = gelu(x2 + b2, approx);
    CHECK(max_diff(fused, ref) < 1e-14);
    (fused * up).sum().backward();
    (ref * up).sum().backward();
    CHECK(max_diff(x1.grad(), x2.grad()) < 1e-13);
    CHECK(max_diff(b1.grad(), b2.grad()) < 1e-13);
    auto r = gradcheck([approx](const std::vector<Tensor>& t) { return bias_gelu(t[0], t[1], approx); },
                       {x.clone().requires_grad_(true), b.clone().requires_grad_(true)});
    CHECK_MESSAGE(r.ok, r.message);
  }
  // float32, a non-contiguous input, and a wrong bias.
  Tensor xf = randn({6, 4}).t(), bf = randn({6});
  CHECK(max_diff(bias_gelu(xf, bf, GeluApprox::Tanh), gelu(xf + bf, GeluApprox::Tanh)) < 1e-6);
  CHECK_THROWS_AS(bias_gelu(xf, randn({4})), ShapeError);
}

TEST_CASE("bias_gelu: the MLP fuses c_fc's bias into the GELU and saves what it saved before") {
  manual_seed(10);
  nn::MLP mlp(16, 64, 0.0, GeluApprox::Tanh);
  Tensor x = randn({4, 9, 16});
  auto run_mlp = [&](bool fused) {
    for (auto& [name, p] : mlp.named_parameters()) p.set_grad(Tensor());
    const int64_t before = memory_stats().category(Category::Activation);
    Tensor y = fused ? mlp.forward(x)
                     : mlp.c_proj->forward(gelu(linear(x, mlp.c_fc->weight, mlp.c_fc->bias), GeluApprox::Tanh));
    const int64_t saved = memory_stats().category(Category::Activation) - before;
    y.pow(2.0).sum().backward();
    std::vector<Tensor> grads;
    for (auto& [name, p] : mlp.named_parameters()) grads.push_back(p.grad().clone());
    return std::pair{saved, grads};
  };
  auto [saved_f, grads_f] = run_mlp(true);
  auto [saved_c, grads_c] = run_mlp(false);
  CHECK(saved_f == saved_c);
  for (size_t i = 0; i < grads_c.size(); ++i) CHECK(max_diff(grads_f[i], grads_c[i]) < 1e-4);
}
