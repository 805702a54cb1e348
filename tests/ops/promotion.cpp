// Type promotion against PyTorch: the result dtype of add, mul and div for every pair of dtypes as
// 1-d and 0-d operands, and with Python int, float and bool scalars (core_promotion.json, written
// by make_fixtures.py). One difference is meant: uint8 with int8 gives PyTorch's int16, which
// memgrad lacks; it gives int32, the smallest type here holding both ranges.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "ops/op_case.h"

namespace {

using mg::Tensor;
using json = nlohmann::json;

const json& promotion_table() {
  static const json table = [] {
    const std::string file = std::string(MG_FIXTURES_DIR) + "/core_promotion.json";
    std::ifstream in(file);
    REQUIRE_MESSAGE(in.good(), "cannot open ", file, "; run tests/reference/make_fixtures.py");
    return json::parse(in);
  }();
  return table;
}

Tensor operand(const json& e, const char* dtype, const char* dim) {
  return mg::ones(e.at(dim).get<int>() ? mg::Shape{3} : mg::Shape{}, mg::optest::dtype_named(e.at(dtype)));
}

// The result's dtype, or the error's message.
std::string result_name(const std::function<Tensor()>& f) {
  try {
    return mg::dtype_name(f().dtype());
  } catch (const mg::Error& e) {
    return std::string("error: ") + e.what();
  }
}

}  // namespace

TEST_CASE("add, mul, div: type promotion matches PyTorch") {
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  using WithScalar = Tensor (*)(const Tensor&, const mg::Scalar&);
  const std::map<std::string, Binary> binary{
      {"add", [](const Tensor& a, const Tensor& b) { return mg::add(a, b); }}, {"mul", mg::mul}, {"div", mg::div}};
  const std::map<std::string, WithScalar> with_scalar{{"add", mg::add}, {"mul", mg::mul}, {"div", mg::div}};
  SUBCASE("tensor op tensor") {
    for (const json& e : promotion_table().at("tensor_tensor")) {
      Tensor a = operand(e, "a", "a_dim"), b = operand(e, "b", "b_dim");
      std::string got = result_name([&] { return binary.at(e.at("op"))(a, b); });
      const std::string want = e.at("result") == "int16" ? "int32" : e.at("result").get<std::string>();
      CHECK_MESSAGE(got == want, e.at("op").get<std::string>(), "(", e["a"], " ", e["a_dim"], "-d, ", e["b"], " ",
                    e["b_dim"], "-d): mg ", got, ", PyTorch ", e["result"]);
    }
  }
  SUBCASE("tensor op python scalar") {
    for (const json& e : promotion_table().at("tensor_scalar")) {
      Tensor a = operand(e, "a", "a_dim");
      const std::string kind = e.at("scalar");
      mg::Scalar s = kind == "int" ? mg::Scalar(2) : kind == "float" ? mg::Scalar(2.5) : mg::Scalar(true);
      std::string got = result_name([&] { return with_scalar.at(e.at("op"))(a, s); });
      CHECK_MESSAGE(got == e.at("result").get<std::string>(), e.at("op").get<std::string>(), "(", e["a"], " ",
                    e["a_dim"], "-d, ", kind, " scalar): mg ", got, ", PyTorch ", e["result"]);
    }
  }
}
