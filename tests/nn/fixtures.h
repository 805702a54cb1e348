// Helpers for tests that compare against the PyTorch fixtures of tests/reference/make_nn_fixtures.py.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <memgrad/memgrad.h>

namespace mg_test {

inline const mg::nn::StateDict& fixture(const std::string& file) {
  static std::map<std::string, mg::nn::StateDict> cache;
  auto it = cache.find(file);
  if (it == cache.end())
    it = cache.emplace(file, mg::nn::load_safetensors(std::string(MG_FIXTURES_DIR) + "/" + file)).first;
  return it->second;
}

inline mg::Tensor get(const mg::nn::StateDict& d, const std::string& key) {
  auto it = d.find(key);
  REQUIRE_MESSAGE(it != d.end(), "fixture has no '" << key << "'");
  return it->second;
}

// Entries "<prefix>.<name>" as "<name>", skipping inputs, outputs and gradients.
inline mg::nn::StateDict params_of(const mg::nn::StateDict& d, const std::string& prefix) {
  mg::nn::StateDict out;
  for (auto& [k, v] : d)
    if (k.rfind(prefix + ".", 0) == 0) {
      std::string rest = k.substr(prefix.size() + 1);
      if (rest == "x" || rest == "r" || rest == "out" || rest == "target" || rest.rfind("grad.", 0) == 0) continue;
      out[rest] = v;
    }
  return out;
}

// Largest |a - b| / (atol + rtol |b|); <= 1 means close.
inline double closeness(const mg::Tensor& a, const mg::Tensor& b, double rtol, double atol) {
  REQUIRE(a.shape() == b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / (atol + rtol * std::abs(y[i])));
  return worst;
}

#define CHECK_CLOSE(a, b, rtol, atol) CHECK_MESSAGE(mg_test::closeness(a, b, rtol, atol) <= 1.0, #a " vs " #b)

}  // namespace mg_test
