// The 8-bit Adams against three references: bitsandbytes' dynamic maps (bit for bit), a float64
// implementation of the same algorithm written here from its description (quantization included:
// the state bytes after N steps equal the reference's wherever the reference is not within float32
// rounding of a decision boundary, and everywhere in the exact-match cases, which check that no
// value comes that close), and bitsandbytes itself on the CPU (optim_adam8bit_bnb.safetensors, from
// tests/reference/make_optim_fixtures.py; its CPU path rounds a few codes differently, see below).
// Also the ledger's bytes, state_dict round trips and the typed errors of a bad state file.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>

#include <memgrad/kernels/quantize8bit.h>
#include <memgrad/memgrad.h>

#include "expect_error.h"

using namespace mg;

namespace {

const nn::StateDict& fixture(const std::string& stem, nn::Metadata* meta = nullptr) {
  static std::map<std::string, std::pair<nn::StateDict, nn::Metadata>> cache;
  auto it = cache.find(stem);
  if (it == cache.end()) {
    nn::Metadata m;
    nn::StateDict d = nn::load_safetensors(std::string(MG_FIXTURES_DIR) + "/" + stem + ".safetensors", &m);
    it = cache.emplace(stem, std::make_pair(std::move(d), std::move(m))).first;
  }
  if (meta) *meta = it->second.second;
  return it->second.first;
}

// bitsandbytes' maps, from the fixture (not from memgrad).
std::vector<double> bnb_map(bool is_signed) {
  return fixture("optim_dynamic_map").at(is_signed ? "signed" : "unsigned").to_vector<double>();
}

// A float64 implementation of one quantized tensor's 8-bit Adam, from the algorithm's description:
// dequantize (code value x block absmax), update the moments and the parameter, requantize to the
// nearest map value of m / absmax (ties to the lower code; the first moment's code moved one towards
// m's sign when the value has the other sign). `margin` is the smallest distance, over every
// quantization so far, between the value and a decision boundary, less a bound on the float32
// kernel's rounding error of that value: while it is positive the kernel must store the same codes.
struct Reference {
  std::vector<double> p, am, av;
  std::vector<int> cm, cv;
  double margin = std::numeric_limits<double>::infinity();
  int64_t step = 0;

  explicit Reference(const std::vector<double>& p0)
      : p(p0), am((p0.size() + 255) / 256, 0.0), av(am), cm(p0.size(), 0), cv(p0.size(), 0) {}

  int quantize(const std::vector<double>& map, double x, double err) {
    int code = 0;
    for (int k = 1; k < 256; ++k)  // nearest; ties to the lower code
      if (std::abs(map[size_t(k)] - x) < std::abs(map[size_t(code)] - x)) code = k;
    for (int k : {code - 1, code}) {  // the boundaries on either side
      if (k < 0 || k > 254) continue;
      margin = std::min(margin, std::abs(x - (map[size_t(k)] + map[size_t(k) + 1]) / 2) - err);
    }
    return code;
  }

  void update(const std::vector<double>& g, double lr, double b1, double b2, double eps, double wd) {
    static const std::vector<double> ms = bnb_map(true), mu = bnb_map(false);
    const double t = double(++step), c1 = 1 - std::pow(b1, t), c2 = std::sqrt(1 - std::pow(b2, t));
    for (size_t b = 0; b < am.size(); ++b) {
      const size_t first = b * 256, last = std::min(p.size(), first + 256);
      std::vector<double> m, v, err_m, err_v;
      for (size_t e = first; e < last; ++e) {
        double mi = ms[size_t(cm[e])] * am[b], vi = mu[size_t(cv[e])] * av[b];
        err_m.push_back(1e-6 * (std::abs(b1 * mi) + std::abs((1 - b1) * g[e])));
        err_v.push_back(1e-6 * (std::abs(b2 * vi) + std::abs((1 - b2) * g[e] * g[e])));
        if (std::isfinite(g[e])) {
          vi = b2 * vi + (1 - b2) * g[e] * g[e];
          mi = b1 * mi + (1 - b1) * g[e];
          p[e] -= lr * c2 / c1 * mi / (std::sqrt(vi) + eps * c2);
          if (wd > 0) p[e] *= 1 - lr * wd;
        } else {
          mi = vi = 0;
        }
        m.push_back(mi), v.push_back(vi);
      }
      am[b] = av[b] = 0;
      for (size_t i = 0; i < m.size(); ++i) am[b] = std::max(am[b], std::abs(m[i])), av[b] = std::max(av[b], v[i]);
      for (size_t i = 0; i < m.size(); ++i) {
        int c = quantize(ms, am[b] > 0 ? m[i] / am[b] : 0.0, am[b] > 0 ? err_m[i] / am[b] : 0.0);
        if (std::signbit(ms[size_t(c)]) != std::signbit(m[i])) c += m[i] > 0 ? 1 : -1;
        cm[first + i] = c;
        cv[first + i] = quantize(mu, av[b] > 0 ? v[i] / av[b] : 0.0, av[b] > 0 ? err_v[i] / av[b] : 0.0);
      }
    }
  }
};

struct Run {
  Tensor p;
  std::unique_ptr<optim::Optimizer> opt;
  Reference ref;
};

// `steps` steps of AdamW8bit (lr 1e-2, weight decay wd, min_8bit_size 16) on n elements drawn from
// `seed`, in memgrad and in the reference.
Run run(uint64_t seed, int64_t n, int steps, double wd) {
  manual_seed(seed);
  Tensor p = randn({n}).requires_grad_();
  Run r{p,
        std::make_unique<optim::AdamW8bit>(std::vector<Tensor>{p},
                                           optim::AdamW8bitOptions(1e-2).weight_decay(wd).min_8bit_size(16)),
        Reference(p.to_vector<double>())};
  for (int s = 0; s < steps; ++s) {
    Tensor g = randn({n}) * 0.1;
    p.set_grad(g);
    r.opt->step();
    r.ref.update(g.to_vector<double>(), 1e-2, 0.9, 0.999, 1e-8, wd);
  }
  return r;
}

std::vector<int> codes(const Tensor& t) {
  std::vector<int> r;
  for (double v : t.to_vector<double>()) r.push_back(int(v));
  return r;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b, double floor) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), floor));
  return worst;
}

}  // namespace

TEST_CASE("Adam8bit: the dynamic maps are bitsandbytes' create_dynamic_map, bit for bit") {
  for (bool is_signed : {true, false}) {
    const auto& map = kernels::quant::dynamic_map(is_signed);
    const std::vector<float> want =
        fixture("optim_dynamic_map").at(is_signed ? "signed" : "unsigned").to_vector<float>();
    REQUIRE(want.size() == 256);
    for (int i = 0; i < 256; ++i)
      CHECK_MESSAGE(map.value[i] == want[size_t(i)], (is_signed ? "signed " : "unsigned ") << i);
    CHECK(map.value[255] == 1.0f);
    CHECK(map.value[is_signed ? 127 : 0] == 0.0f);
  }
}

TEST_CASE("Adam8bit: nearest_code finds the nearest map value, ties to the lower code") {
  const auto& map = kernels::quant::dynamic_map(true);
  manual_seed(1);
  std::vector<double> xs = (rand({4000}) * 2.0 - 1.0).to_vector<double>();
  for (int k = 0; k < 255; ++k) xs.push_back(0.5 * (double(map.value[k]) + double(map.value[k + 1])));  // ties
  for (int k = 0; k < 256; ++k) xs.push_back(map.value[k]);
  for (double xd : xs) {
    const float x = float(xd);
    const int code = kernels::quant::nearest_code(map.mid, x);
    int best = 0;
    for (int k = 1; k < 256; ++k)
      if (std::abs(double(map.value[k]) - x) < std::abs(double(map.value[best]) - x)) best = k;
    const double d_code = std::abs(double(map.value[code]) - x), d_best = std::abs(double(map.value[best]) - x);
    // the midpoints are floats, so at a tie (x the float nearest a midpoint) either side may win
    CHECK_MESSAGE((code == best || std::abs(d_code - d_best) <= 4 * FLT_EPSILON * std::abs(x)), "x = " << x);
  }
}

TEST_CASE("Adam8bit: state bytes equal a float64 reference's after N steps (exact-match cases)") {
  // Seeds and sizes whose values never come within the float32 error bound of a decision boundary
  // (checked: margin > 0), so every code must match: 600 elements (two full blocks, one of 88).
  for (auto [seed, wd] : {std::pair<uint64_t, double>{5, 0.0}, {11, 0.05}}) {
    CAPTURE(seed);
    Run r = run(seed, 600, 4, wd);
    REQUIRE_MESSAGE(r.ref.margin > 0, "the case's values come within rounding of a boundary: pick another seed");
    const auto& state = r.opt->state_dict();
    CHECK(codes(state.at("state.0.exp_avg")) == r.ref.cm);
    CHECK(codes(state.at("state.0.exp_avg_sq")) == r.ref.cv);
    CHECK(max_rel(state.at("state.0.exp_avg.absmax").to_vector<double>(), r.ref.am, 1e-30) < 1e-5);
    CHECK(max_rel(state.at("state.0.exp_avg_sq.absmax").to_vector<double>(), r.ref.av, 1e-30) < 1e-5);
    CHECK(max_rel(r.p.to_vector<double>(), r.ref.p, 1e-3) < 1e-5);
  }
}

TEST_CASE("Adam8bit: a larger run matches the float64 reference except next to decision boundaries") {
  Run r = run(3, 5000, 10, 0.01);
  const auto& state = r.opt->state_dict();
  for (const char* name : {"exp_avg", "exp_avg_sq"}) {
    const std::vector<int> got = codes(state.at(std::string("state.0.") + name));
    const std::vector<int>& want = std::string(name) == "exp_avg" ? r.ref.cm : r.ref.cv;
    int64_t differ = 0, far = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i], far += std::abs(got[i] - want[i]) > 1;
    CAPTURE(name);
    CHECK(far == 0);              // a differing code is the neighbour across a boundary
    CHECK(differ * 1000 < 5000);  // and rare (the values were within float32 rounding of it)
  }
  CHECK(max_rel(r.p.to_vector<double>(), r.ref.p, 1e-3) < 1e-4);
}

TEST_CASE("Adam8bit: tensors below min_8bit_size keep float32 moments and follow the 32-bit rule") {
  manual_seed(2);
  Tensor p = randn({300}).requires_grad_();
  std::vector<double> ref = p.to_vector<double>(), m(300, 0), v(300, 0);
  optim::AdamW8bit opt({p}, optim::AdamW8bitOptions(1e-2).weight_decay(0.1));
  for (int s = 1; s <= 5; ++s) {
    Tensor g = randn({300});
    p.set_grad(g);
    opt.step();
    const std::vector<double> gv = g.to_vector<double>();
    const double c1 = 1 - std::pow(0.9, s), c2 = std::sqrt(1 - std::pow(0.999, s));
    for (size_t i = 0; i < 300; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * gv[i], v[i] = 0.999 * v[i] + 0.001 * gv[i] * gv[i];
      ref[i] = (ref[i] - 1e-2 * c2 / c1 * m[i] / (std::sqrt(v[i]) + 1e-8 * c2)) * (1 - 1e-2 * 0.1);
    }
  }
  const auto state = opt.state_dict();
  CHECK(state.at("state.0.exp_avg").dtype() == kFloat32);
  CHECK_FALSE(state.count("state.0.exp_avg.absmax"));
  CHECK(max_rel(p.to_vector<double>(), ref, 1e-3) < 1e-5);
  CHECK(max_rel(state.at("state.0.exp_avg").to_vector<double>(), m, 1e-2) < 1e-5);
}

TEST_CASE("Adam8bit: against bitsandbytes on the CPU") {
  // bitsandbytes' CPU path differs from its CUDA kernel, which memgrad follows, in three ways: it
  // decays the parameter before the update (the kernel after: lr * wd * update apart per step), it
  // adds eps after dividing out the bias correction (rounding only), and it finds codes in a table of
  // 65536 bins over [-1, 1] rather than by the nearest value, so near zero, where the map's values
  // are closer than a bin, its codes are off by several (values within a bin, 3e-5 of the absmax).
  // So: the codes equal but for a few, the dequantized moments within one bin or one code step of
  // each other, and the parameters within what those differences move them.
  nn::Metadata meta;
  const nn::StateDict& f = fixture("optim_adam8bit_bnb", &meta);
  const std::vector<double> ms = bnb_map(true), mu = bnb_map(false);
  for (std::string name : {"adamw", "adam", "full"}) {
    CAPTURE(name);
    const auto o = nlohmann::json::parse(meta.at(name));
    Tensor p = f.at(name + ".param").clone().requires_grad_();
    const Tensor grads = f.at(name + ".grads");
    const double lr = o.at("lr"), wd = o.value("weight_decay", o.at("optimizer") == "AdamW8bit" ? 1e-2 : 0.0);
    const int steps = o.at("steps");
    optim::AdamW8bit opt({p},
                         optim::AdamW8bitOptions(lr).weight_decay(wd).min_8bit_size(o.value("min_8bit_size", 4096)));
    for (int s = 0; s < steps; ++s) {
      p.set_grad(grads.select(0, s).clone());
      opt.step();
    }
    const auto state = opt.state_dict();
    const std::string s = name + ".state.";
    // the decay's order: lr * wd * |update| <= lr * wd * lr * 3 (|m| / sqrt(v) stays below 3 here)
    double atol = steps * lr * wd * lr * 3 + 1e-6;
    if (f.count(s + "absmax1")) {
      for (auto [mine, theirs, map] : {std::tuple{"exp_avg", "state1", &ms}, {"exp_avg_sq", "state2", &mu}}) {
        const std::vector<int> a = codes(state.at(std::string("state.0.") + mine)), b = codes(f.at(s + theirs));
        int64_t differ = 0;
        double worst = 0;  // normalized: the map values' difference
        for (size_t i = 0; i < a.size(); ++i) {
          differ += a[i] != b[i];
          worst = std::max(worst, std::abs((*map)[size_t(a[i])] - (*map)[size_t(b[i])]));
        }
        MESSAGE(name, " ", mine, ": ", differ, " of ", a.size(), " codes differ from bitsandbytes', by at most ", worst,
                " of the absmax");
        CHECK(differ * 100 <= int64_t(a.size()));  // at most 1%
        CHECK(worst <= 0.016);                     // one code step near 1 (1/64 of 0.9), or one bin near 0
      }
      CHECK(max_rel(state.at("state.0.exp_avg.absmax").to_vector<double>(), f.at(s + "absmax1").to_vector<double>(),
                    1e-30) < 1e-5);
      CHECK(max_rel(state.at("state.0.exp_avg_sq.absmax").to_vector<double>(), f.at(s + "absmax2").to_vector<double>(),
                    1e-30) < 1e-5);
      atol += steps * lr * 0.016 * 10;  // a differing code moves the next updates by its share of the step
    } else {
      CHECK(max_rel(state.at("state.0.exp_avg").to_vector<double>(), f.at(s + "state1").to_vector<double>(), 1e-2) <
            1e-5);
    }
    const std::vector<double> x = p.to_vector<double>(), want = f.at(name + ".final").to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - want[i]));
    MESSAGE(name, ": parameters within ", worst, " of bitsandbytes' (bound ", atol, ")");
    CHECK(worst <= atol);
  }
}

TEST_CASE("Adam8bit: a non-finite gradient element restarts its moments and leaves its parameter") {
  Tensor p = ones({512}).requires_grad_();
  optim::AdamW8bit opt({p}, optim::AdamW8bitOptions(0.1).weight_decay(0).min_8bit_size(1));
  std::vector<float> g(512, 1.0f);
  g[3] = std::numeric_limits<float>::quiet_NaN(), g[300] = std::numeric_limits<float>::infinity();
  p.set_grad(tensor(g));
  opt.step();
  const std::vector<float> after = p.to_vector<float>();
  CHECK(after[3] == 1.0f);
  CHECK(after[300] == 1.0f);
  CHECK(after[4] == doctest::Approx(0.9).epsilon(1e-5));  // the first step moves by lr
  const auto state = opt.state_dict();
  const std::vector<float> absmax = state.at("state.0.exp_avg.absmax").to_vector<float>();
  CHECK(std::isfinite(absmax[0]));
  CHECK(std::isfinite(absmax[1]));
}

TEST_CASE("Adam8bit: state bytes in the ledger, the report and on meta") {
  for (Device d : {kCPU, kMeta}) {
    CAPTURE(d);
    Tensor big = zeros({3000, 2}, TensorOptions().device(d)).requires_grad_(),
           small = zeros({100}, TensorOptions().device(d)).requires_grad_();
    optim::AdamW8bit opt(std::vector<std::pair<std::string, Tensor>>{{"big", big}, {"small", small}});
    const int64_t before = memory_stats(d).category(Category::OptimizerState);
    big.set_grad(zeros({3000, 2}, TensorOptions().device(d)));
    small.set_grad(zeros({100}, TensorOptions().device(d)));
    opt.step();
    // big: 6000 codes per moment (6144 B in 512 B granules) and 24 blocks of absmax (96 -> 512 B);
    // small: float32 moments (400 -> 512 B each)
    CHECK(opt.state_bytes(big) == 2 * 6144 + 2 * 512);
    CHECK(opt.state_bytes(small) == 2 * 512);
    CHECK(memory_stats(d).category(Category::OptimizerState) - before == opt.state_bytes());
    const optim::StateReport r = opt.state_report();
    REQUIRE(r.rows.size() == 2);
    const std::vector<std::pair<std::string, int64_t>> want = {
        {"exp_avg", 6144}, {"exp_avg_sq", 6144}, {"exp_avg.absmax", 512}, {"exp_avg_sq.absmax", 512}};
    CHECK(r.rows[0].state == want);
    CHECK(r.elements == 6100);
    CHECK(r.str().find("exp_avg.absmax: 512") != std::string::npos);
  }
}

TEST_CASE("Adam8bit: state_dict round trip continues bit for bit; a bad state file is refused") {
  manual_seed(4);
  auto make = [](const Tensor& p) {
    return std::make_unique<optim::AdamW8bit>(std::vector<Tensor>{p}, optim::AdamW8bitOptions(1e-2).min_8bit_size(16));
  };
  Tensor p = randn({1000}).requires_grad_(), q = p.detach().clone().requires_grad_();
  auto a = make(p);
  std::vector<Tensor> grads;
  for (int s = 0; s < 6; ++s) grads.push_back(randn({1000}));
  for (int s = 0; s < 3; ++s) p.set_grad(grads[size_t(s)]), a->step();
  const std::string path = "/tmp/mg_adam8bit_state_" + std::to_string(::getpid()) + ".safetensors";
  nn::save_safetensors(a->state_dict(), path);
  {
    NoGradGuard ng;
    q.copy_(p);
  }
  auto b = make(q);
  b->load_state_dict(nn::load_safetensors(path));
  for (int s = 3; s < 6; ++s) p.set_grad(grads[size_t(s)]), a->step(), q.set_grad(grads[size_t(s)]), b->step();
  CHECK(equal(p, q));
  for (auto& [k, t] : a->state_dict()) CHECK_MESSAGE(equal(t, b->state_dict().at(k)), k);

  const optim::StateDict good = a->state_dict();
  auto with = [&](const std::string& key, const Tensor& t) {
    optim::StateDict d = good;
    d[key] = t;
    return d;
  };
  auto c = make(randn({1000}).requires_grad_());
  expect_error<ShapeError>([&] { c->load_state_dict(with("state.0.exp_avg.absmax", zeros({3}))); },
                           {"'state.0.exp_avg.absmax' expected shape [4]", "one float32 absmax per block of 256",
                            "1000 elements", "got [3]"});
  expect_error<ValueError>(
      [&] {
        c->load_state_dict(with("state.0.exp_avg_sq.absmax", tensor(std::vector<float>{1, NAN, 1, 1})));
      },
      {"'state.0.exp_avg_sq.absmax' block 1", "expected a finite absmax >= 0", "nan"});
  expect_error<DTypeError>([&] { c->load_state_dict(with("state.0.exp_avg", zeros({1000}))); },
                           {"'state.0.exp_avg' expected dtype uint8, got float32"});
  CHECK_FALSE(c->state_bytes());  // nothing loaded
}

TEST_CASE("Adam8bit: options out of range are refused") {
  Tensor p = ones({3}).requires_grad_();
  expect_error<ValueError>([&] { optim::Adam8bit({p}, optim::Adam8bitOptions().betas(1.0, 0.9)); },
                           {"Adam8bit", "betas in [0, 1)"});
  expect_error<ValueError>([&] { optim::AdamW8bit({p}, optim::AdamW8bitOptions().min_8bit_size(0)); },
                           {"AdamW8bit", "min_8bit_size", "whole number >= 1", "got 0"});
  expect_error<ValueError>([&] { optim::AdamW8bit({p}, optim::AdamW8bitOptions().eps(-1)); },
                           {"AdamW8bit", "eps and weight_decay >= 0"});
}
