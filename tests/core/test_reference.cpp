// Parity with PyTorch: replays every case of tests/reference/fixtures/core_*.json (written by
// tests/reference/make_fixtures.py) through mg ops and compares outputs, input gradients and
// result dtypes. Each case is a SUBCASE named after it, so a failure names the op.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include <memgrad/core/ops.h>
#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;
using mg::Tensor;
using Tensors = std::vector<Tensor>;

const json& fixture(const std::string& file) {
  static std::map<std::string, json> cache;  // doctest reruns a test case once per subcase
  auto it = cache.find(file);
  if (it == cache.end()) {
    std::ifstream in(std::string(MG_FIXTURES_DIR) + "/" + file);
    REQUIRE_MESSAGE(in.good(), "cannot open fixture ", file, "; run tests/reference/make_fixtures.py");
    it = cache.emplace(file, json::parse(in)).first;
  }
  return it->second;
}

mg::DType dtype_named(const std::string& name) {
  for (mg::DType t : {mg::kBool, mg::kInt32, mg::kInt64, mg::kFloat16, mg::kBFloat16, mg::kFloat32, mg::kFloat64})
    if (name == mg::dtype_name(t)) return t;
  FAIL("unknown dtype in fixture: ", name);
  return mg::kFloat32;
}

// Values go through float64, which holds every fixture value (float32, small integers, bools) exactly.
Tensor from_json(const json& j) {
  std::vector<double> v;
  for (const json& e : j.at("data")) v.push_back(e.is_boolean() ? double(e.get<bool>()) : e.get<double>());
  auto shape = j.at("shape").get<mg::Shape>();
  Tensor t = shape.empty() ? mg::scalar_tensor(v.at(0), mg::kFloat64) : mg::tensor(v, shape, mg::kFloat64);
  return t.to(dtype_named(j.at("dtype")));
}

Tensor apply_view(Tensor t, const json& steps) {
  for (const json& s : steps) {
    const std::string kind = s.at(0);
    if (kind == "transpose")
      t = t.transpose(s.at(1), s.at(2));
    else if (kind == "permute")
      t = t.permute(s.at(1).get<std::vector<int64_t>>());
    else if (kind == "slice")
      t = t.slice(s.at(1), s.at(2), s.at(3), s.at(4));
    else if (kind == "expand")
      t = t.expand(s.at(1).get<mg::Shape>());
    else
      FAIL("unknown view step ", kind);
  }
  return t;
}

// An integer JSON number is a Python int, which PyTorch promotes differently from a float.
mg::Scalar scalar_from(const json& j) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  return j.get<double>();
}

std::optional<mg::Scalar> optional_scalar(const json& j) {
  if (j.is_null()) return std::nullopt;
  return scalar_from(j);
}

mg::Reduction reduction_from(const std::string& r) {
  return r == "mean" ? mg::Reduction::Mean : r == "sum" ? mg::Reduction::Sum : mg::Reduction::None;
}

Tensor optional_input(const Tensors& x, size_t i) { return i < x.size() ? x[i] : Tensor(); }

using OpFn = std::function<Tensors(const Tensors&, const json&)>;

// Each fixture op name rebuilt with mg ops, mirroring TORCH_OPS in make_fixtures.py.
const std::map<std::string, OpFn>& op_table() {
  static const std::map<std::string, OpFn> table = [] {
    std::map<std::string, OpFn> m;
    auto one = [](auto f) { return OpFn([f](const Tensors& x, const json& a) { return Tensors{f(x, a)}; }); };
    auto alpha = [](const json& a) { return a.contains("alpha") ? scalar_from(a["alpha"]) : mg::Scalar(1); };
    m["add"] = one([=](const Tensors& x, const json& a) { return mg::add(x[0], x[1], alpha(a)); });
    m["sub"] = one([=](const Tensors& x, const json& a) { return mg::sub(x[0], x[1], alpha(a)); });
    m["mul"] = one([](const Tensors& x, const json&) { return x[0] * x[1]; });
    m["div"] = one([](const Tensors& x, const json&) { return x[0] / x[1]; });
    m["pow"] = one([](const Tensors& x, const json&) { return mg::pow(x[0], x[1]); });
    m["maximum"] = one([](const Tensors& x, const json&) { return mg::maximum(x[0], x[1]); });
    m["minimum"] = one([](const Tensors& x, const json&) { return mg::minimum(x[0], x[1]); });
    m["add_scalar"] = one([](const Tensors& x, const json& a) { return x[0] + scalar_from(a["scalar"]); });
    m["sub_scalar"] = one([](const Tensors& x, const json& a) { return x[0] - scalar_from(a["scalar"]); });
    m["mul_scalar"] = one([](const Tensors& x, const json& a) { return x[0] * scalar_from(a["scalar"]); });
    m["div_scalar"] = one([](const Tensors& x, const json& a) { return x[0] / scalar_from(a["scalar"]); });
    m["pow_scalar"] = one([](const Tensors& x, const json& a) { return mg::pow(x[0], scalar_from(a["scalar"])); });
    m["rsub_scalar"] = one([](const Tensors& x, const json& a) { return scalar_from(a["scalar"]) - x[0]; });
    using Unary = Tensor (*)(const Tensor&);
    for (auto [name, f] : std::vector<std::pair<const char*, Unary>>{{"neg", mg::neg},
                                                                     {"exp", mg::exp},
                                                                     {"log", mg::log},
                                                                     {"sqrt", mg::sqrt},
                                                                     {"rsqrt", mg::rsqrt},
                                                                     {"abs", mg::abs},
                                                                     {"tanh", mg::tanh},
                                                                     {"sigmoid", mg::sigmoid},
                                                                     {"relu", mg::relu},
                                                                     {"silu", mg::silu}})
      m[name] = one([f = f](const Tensors& x, const json&) { return f(x[0]); });
    m["gelu"] = one([](const Tensors& x, const json& a) {
      return mg::gelu(x[0], a["approximate"] == "tanh" ? mg::GeluApprox::Tanh : mg::GeluApprox::None);
    });
    m["clamp"] = one([](const Tensors& x, const json& a) {
      return mg::clamp(x[0], optional_scalar(a["lo"]), optional_scalar(a["hi"]));
    });
    m["where"] = one([](const Tensors& x, const json&) { return mg::where(x[0], x[1], x[2]); });
    m["masked_fill"] =
        one([](const Tensors& x, const json& a) { return mg::masked_fill(x[0], x[1], scalar_from(a["value"])); });
    using Compare = Tensor (*)(const Tensor&, const Tensor&);
    using CompareScalar = Tensor (*)(const Tensor&, const mg::Scalar&);
    for (auto [name, f, fs] : std::vector<std::tuple<std::string, Compare, CompareScalar>>{{"eq", mg::eq, mg::eq},
                                                                                           {"ne", mg::ne, mg::ne},
                                                                                           {"lt", mg::lt, mg::lt},
                                                                                           {"le", mg::le, mg::le},
                                                                                           {"gt", mg::gt, mg::gt},
                                                                                           {"ge", mg::ge, mg::ge}}) {
      m[name] = one([f = f](const Tensors& x, const json&) { return f(x[0], x[1]); });
      m[name + "_scalar"] =
          one([fs = fs](const Tensors& x, const json& a) { return fs(x[0], scalar_from(a["scalar"])); });
    }
    using Reduce = Tensor (*)(const Tensor&, const std::vector<int64_t>&, bool);
    for (auto [name, f] : std::vector<std::pair<const char*, Reduce>>{
             {"sum", mg::sum}, {"mean", mg::mean}, {"amax", mg::amax}, {"amin", mg::amin}})
      m[name] = one([f = f](const Tensors& x, const json& a) { return f(x[0], a["dims"], a["keepdim"]); });
    m["var"] =
        one([](const Tensors& x, const json& a) { return mg::var(x[0], a["dims"], a["correction"], a["keepdim"]); });
    m["max_dim"] = [](const Tensors& x, const json& a) {
      auto r = mg::max(x[0], a["dim"], a["keepdim"]);
      return Tensors{std::get<0>(r), std::get<1>(r)};
    };
    m["min_dim"] = [](const Tensors& x, const json& a) {
      auto r = mg::min(x[0], a["dim"], a["keepdim"]);
      return Tensors{std::get<0>(r), std::get<1>(r)};
    };
    m["max_all"] = one([](const Tensors& x, const json&) { return mg::max(x[0]); });
    m["min_all"] = one([](const Tensors& x, const json&) { return mg::min(x[0]); });
    m["argmax"] = one([](const Tensors& x, const json& a) { return mg::argmax(x[0], a["dim"], a["keepdim"]); });
    m["argmin"] = one([](const Tensors& x, const json& a) { return mg::argmin(x[0], a["dim"], a["keepdim"]); });
    m["softmax"] = one([](const Tensors& x, const json& a) { return mg::softmax(x[0], a["dim"]); });
    m["log_softmax"] = one([](const Tensors& x, const json& a) { return mg::log_softmax(x[0], a["dim"]); });
    m["matmul"] = one([](const Tensors& x, const json&) { return mg::matmul(x[0], x[1]); });
    m["linear"] = one([](const Tensors& x, const json&) { return mg::linear(x[0], x[1], optional_input(x, 2)); });
    m["cat"] = one([](const Tensors& x, const json& a) { return mg::cat(x, a["dim"]); });
    m["stack"] = one([](const Tensors& x, const json& a) { return mg::stack(x, a["dim"]); });
    m["split"] = [](const Tensors& x, const json& a) { return mg::split(x[0], a["size"], a["dim"]); };
    m["split_with_sizes"] = [](const Tensors& x, const json& a) {
      return mg::split_with_sizes(x[0], a["sizes"], a["dim"]);
    };
    m["chunk"] = [](const Tensors& x, const json& a) { return mg::chunk(x[0], a["chunks"], a["dim"]); };
    m["gather"] = one([](const Tensors& x, const json& a) { return mg::gather(x[0], a["dim"], x[1]); });
    m["index_select"] = one([](const Tensors& x, const json& a) { return mg::index_select(x[0], a["dim"], x[1]); });
    m["embedding"] = one([](const Tensors& x, const json&) { return mg::embedding(x[0], x[1]); });
    m["tril"] = one([](const Tensors& x, const json& a) { return mg::tril(x[0], a["diagonal"]); });
    m["triu"] = one([](const Tensors& x, const json& a) { return mg::triu(x[0], a["diagonal"]); });
    m["layer_norm"] = one([](const Tensors& x, const json& a) {
      return mg::layer_norm(x[0], a["normalized_shape"], optional_input(x, 1), optional_input(x, 2), a["eps"]);
    });
    m["cross_entropy"] = one([](const Tensors& x, const json& a) {
      return mg::cross_entropy(x[0], x[1], a["ignore_index"], a["label_smoothing"], reduction_from(a["reduction"]));
    });
    m["mse_loss"] =
        one([](const Tensors& x, const json& a) { return mg::mse_loss(x[0], x[1], reduction_from(a["reduction"])); });
    m["conv2d"] = one([](const Tensors& x, const json& a) {
      return mg::conv2d(x[0], x[1], optional_input(x, 2), a["stride"], a["padding"], a["dilation"], a["groups"]);
    });
    m["max_pool2d"] = one(
        [](const Tensors& x, const json& a) { return mg::max_pool2d(x[0], a["kernel"], a["stride"], a["padding"]); });
    m["avg_pool2d"] = one(
        [](const Tensors& x, const json& a) { return mg::avg_pool2d(x[0], a["kernel"], a["stride"], a["padding"]); });
    // The two models of make_fixtures.py: inputs are x, target, then each layer's weight and bias.
    m["mlp"] = [](const Tensors& x, const json&) {
      Tensor logits = mg::linear(mg::relu(mg::linear(x[0], x[2], x[3])), x[4], x[5]);
      return Tensors{logits, mg::cross_entropy(logits, x[1])};
    };
    m["convnet"] = [](const Tensors& x, const json&) {
      Tensor h = mg::max_pool2d(mg::relu(mg::conv2d(x[0], x[2], x[3], {1, 1}, {1, 1})), {2, 2});
      h = mg::avg_pool2d(mg::relu(mg::conv2d(h, x[4], x[5], {1, 1}, {0, 0}, {1, 1}, 2)), {2, 2});
      Tensor logits = mg::linear(h.flatten(1), x[6], x[7]);
      return Tensors{logits, mg::cross_entropy(logits, x[1])};
    };
    return m;
  }();
  return table;
}

struct Tolerance {
  double rtol, atol;
};

// Shape, dtype and every value: floats within atol + rtol * |want|, everything else exactly.
void check_matches(const Tensor& got, const json& want, const Tolerance& tol, const std::string& what) {
  REQUIRE_MESSAGE(got.defined(), what, ": mg gave no tensor");
  CHECK_MESSAGE(got.shape() == want.at("shape").get<mg::Shape>(), what, ": shape ", mg::shape_str(got.shape()),
                ", PyTorch ", want.at("shape").dump());
  CHECK_MESSAGE(std::string(mg::dtype_name(got.dtype())) == want.at("dtype").get<std::string>(), what, ": dtype ",
                got.dtype(), ", PyTorch ", want.at("dtype").get<std::string>());
  if (got.shape() != want.at("shape").get<mg::Shape>()) return;
  std::vector<double> g = got.to_vector<double>(), w = from_json(want).to_vector<double>();
  bool exact = !mg::is_floating(got.dtype());
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double err = std::abs(g[i] - w[i]);  // a NaN from mg fails too: fixtures hold no NaN
    double ratio = exact ? (err == 0 ? 0.0 : INFINITY) : err / (tol.atol + tol.rtol * std::abs(w[i]));
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", g.size(), " elements differ from PyTorch; worst at flat index ",
                worst, ": mg ", g.empty() ? 0 : g[worst], ", PyTorch ", w.empty() ? 0 : w[worst], " (rtol ", tol.rtol,
                ", atol ", tol.atol, ")");
}

void run_case(const json& c, const json& fixture_file) {
  Tolerance tol{fixture_file.at("rtol"), fixture_file.at("atol")};
  if (c.contains("tolerance")) tol = {c["tolerance"].at("rtol"), c["tolerance"].at("atol")};  // reason in the JSON
  Tensors leaves, views;
  for (const json& in : c.at("inputs")) {
    Tensor leaf = from_json(in);
    if (in.at("requires_grad").get<bool>()) leaf.requires_grad_();
    leaves.push_back(leaf);
    views.push_back(apply_view(leaf, in.at("view")));
  }
  const std::string op = c.at("op");
  auto fn = op_table().find(op);
  REQUIRE_MESSAGE(fn != op_table().end(), "no mg rebuild of fixture op ", op);
  Tensors outs = fn->second(views, c.at("args"));
  REQUIRE(outs.size() == c.at("outputs").size());
  for (size_t i = 0; i < outs.size(); ++i) check_matches(outs[i], c["outputs"][i], tol, "output " + std::to_string(i));

  // sum_i <out_i, upstream_i> has exactly upstream_i as the gradient of out_i.
  Tensor objective;
  for (size_t i = 0; i < outs.size(); ++i) {
    const json& up = c.at("grad_outputs").at(i);
    if (up.is_null()) continue;
    Tensor term = mg::sum(outs[i] * from_json(up));
    objective = objective.defined() ? objective + term : term;
  }
  if (!objective.defined()) return;
  objective.backward();
  for (size_t i = 0; i < leaves.size(); ++i) {
    const json& want = c.at("grads").at(i);
    if (want.is_null()) continue;
    std::string what = "gradient of input " + std::to_string(i);
    if (c.contains("input_names")) what += " (" + c["input_names"].at(i).get<std::string>() + ")";
    check_matches(leaves[i].grad(), want, tol, what);
  }
}

void run_fixture(const std::string& file) {
  const json& f = fixture(file);
  for (const json& c : f.at("cases")) {
    const std::string name = c.at("name");
    SUBCASE(name.c_str()) { run_case(c, f); }
  }
}

}  // namespace

TEST_CASE("reference: elementwise ops match PyTorch") { run_fixture("core_elementwise.json"); }
TEST_CASE("reference: reductions and softmax match PyTorch") { run_fixture("core_reduce.json"); }
TEST_CASE("reference: matmul and linear match PyTorch") { run_fixture("core_linalg.json"); }
TEST_CASE("reference: shape and indexing ops match PyTorch") { run_fixture("core_index.json"); }
TEST_CASE("reference: layer norm, losses, conv and pooling match PyTorch") { run_fixture("core_nn.json"); }
TEST_CASE("reference: an MLP and a convnet match PyTorch") { run_fixture("core_models.json"); }

TEST_CASE("reference: type promotion matches PyTorch") {
  const json& f = fixture("core_promotion.json");
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  using WithScalar = Tensor (*)(const Tensor&, const mg::Scalar&);
  const std::map<std::string, Binary> binary{
      {"add", [](const Tensor& a, const Tensor& b) { return mg::add(a, b); }}, {"mul", mg::mul}, {"div", mg::div}};
  const std::map<std::string, WithScalar> with_scalar{{"add", mg::add}, {"mul", mg::mul}, {"div", mg::div}};
  auto operand = [](const json& e, const char* dtype, const char* dim) {
    return mg::ones(e.at(dim).get<int>() ? mg::Shape{3} : mg::Shape{}, dtype_named(e.at(dtype)));
  };
  auto result_name = [](const std::function<Tensor()>& f) -> std::string {
    try {
      return mg::dtype_name(f().dtype());
    } catch (const mg::Error& e) {
      return std::string("error: ") + e.what();
    }
  };
  SUBCASE("tensor op tensor") {
    for (const json& e : f.at("tensor_tensor")) {
      Tensor a = operand(e, "a", "a_dim"), b = operand(e, "b", "b_dim");
      std::string got = result_name([&] { return binary.at(e.at("op"))(a, b); });
      CHECK_MESSAGE(got == e.at("result").get<std::string>(), e.at("op").get<std::string>(), "(", e["a"], " ",
                    e["a_dim"], "-d, ", e["b"], " ", e["b_dim"], "-d): mg ", got, ", PyTorch ", e["result"]);
    }
  }
  SUBCASE("tensor op python scalar") {
    for (const json& e : f.at("tensor_scalar")) {
      Tensor a = operand(e, "a", "a_dim");
      const std::string kind = e.at("scalar");
      mg::Scalar s = kind == "int" ? mg::Scalar(2) : kind == "float" ? mg::Scalar(2.5) : mg::Scalar(true);
      std::string got = result_name([&] { return with_scalar.at(e.at("op"))(a, s); });
      CHECK_MESSAGE(got == e.at("result").get<std::string>(), e.at("op").get<std::string>(), "(", e["a"], " ",
                    e["a_dim"], "-d, ", kind, " scalar): mg ", got, ", PyTorch ", e["result"]);
    }
  }
}
