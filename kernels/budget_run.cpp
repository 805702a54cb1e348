#include <memgrad/kernels/budget_run.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <memgrad/core/error.h>

namespace mg::kernels {

namespace {

// The tensor parameters each kernel writes, by name (kernel_list.h's names). What a kernel only
// reads is left out: the budget runtime records replays for what is written.
const std::map<std::string, std::set<std::string>>& write_table() {
  static const std::map<std::string, std::set<std::string>> t = {
      {"copy", {"dst"}},
      {"fill", {"dst"}},
      {"fill_range", {"dst"}},
      {"uniform", {"dst"}},
      {"normal", {"dst"}},
      {"randint", {"dst"}},
      {"unary", {"out"}},
      {"unary_backward", {"grad_in"}},
      {"binary", {"out"}},
      {"bias_gelu", {"out"}},
      {"bias_gelu_backward", {"grad_in"}},
      {"where", {"out"}},
      {"dropout", {"out"}},
      {"bias_dropout_add", {"out"}},
      {"reduce", {"out"}},
      {"scan", {"out"}},
      {"cumprod_backward", {"grad_in"}},
      {"sort", {"values", "indices"}},
      {"arg_reduce", {"values", "indices"}},
      {"softmax", {"out"}},
      {"softmax_backward", {"grad_in"}},
      {"scaled_masked_softmax", {"out"}},
      {"cross_entropy", {"loss"}},
      {"cross_entropy_backward", {"grad_logits"}},
      {"layer_norm", {"out", "mean", "rstd"}},
      {"add_layer_norm", {"sum", "out", "mean", "rstd"}},
      {"layer_norm_backward", {"grad_x", "grad_weight", "grad_bias"}},
      // In eval, batch_norm reads mean and var (the running statistics) rather than writing them:
      // taking them as written there only costs recompute (out then keeps no recipe), never a value.
      {"batch_norm", {"out", "mean", "var", "rstd"}},
      {"batch_norm_backward", {"grad_x", "grad_weight", "grad_bias"}},
      {"matmul", {"out"}},
      {"attention", {"out", "lse"}},
      {"attention_backward", {"delta", "grad_q", "grad_k", "grad_v"}},
      {"index_select", {"out"}},
      {"index_add", {"dst"}},
      {"gather", {"out"}},
      {"scatter", {"dst"}},
      {"scatter_add", {"dst"}},
      {"im2col", {"col"}},
      {"col2im", {"x"}},
      {"max_pool2d", {"out", "indices"}},
      {"max_pool2d_backward", {"grad_x"}},
      {"avg_pool2d", {"out"}},
      {"avg_pool2d_backward", {"grad_x"}},
      {"conv2d", {"out"}},
      {"conv2d_backward_input", {"grad_x"}},
      {"conv2d_backward_weight", {"grad_weight"}},
      {"sgd_update", {}},
      {"adam_update", {}},
      {"adam8bit_update", {}},
      {"adafactor_update", {}},
      {"non_finite_check_and_unscale", {"found_inf"}},
  };
  return t;
}

// kernel_list.h's parameters as text: the names of each kernel's Tensor parameters, in order.
const std::map<std::string, std::vector<std::string>>& tensor_params() {
  static const auto params = [] {
    std::map<std::string, std::vector<std::string>> r;
    auto parse = [&](const char* name, const char* text) {
      auto& names = r[name];
      std::stringstream ss(text);
      for (std::string p; std::getline(ss, p, ',');) {
        if (p.find("const Tensor&") == std::string::npos) continue;
        auto end = p.find_last_not_of(" \t\n");
        auto begin = p.find_last_of(" &", end);
        names.push_back(p.substr(begin + 1, end - begin));
      }
    };
#define MG_KERNEL(name, ret, ...) parse(#name, #__VA_ARGS__);
#define MG_OPTIONAL_KERNEL MG_KERNEL
#include <memgrad/kernels/kernel_list.h>
    return r;
  }();
  return params;
}

}  // namespace

std::vector<bool> written_tensors(const char* kernel, size_t tensor_count, size_t list_tensors) {
  const auto& params = tensor_params();
  auto p = params.find(kernel);
  auto w = write_table().find(kernel);
  MG_CHECK(p != params.end() && w != write_table().end() && p->second.size() == tensor_count, Error, "budget: kernel ",
           kernel, " is missing from the table of what kernels write (kernels/budget_run.cpp)");
  std::vector<bool> r;
  for (auto& name : p->second) r.push_back(w->second.count(name) > 0);
  r.insert(r.end(), list_tensors, true);
  return r;
}

std::vector<std::string> written_table_errors() {
  std::vector<std::string> errors;
  const auto& params = tensor_params();
  for (auto& [kernel, names] : params) {
    auto w = write_table().find(kernel);
    if (w == write_table().end()) {
      errors.push_back(kernel + ": not in the write table");
      continue;
    }
    for (auto& name : w->second)
      if (std::find(names.begin(), names.end(), name) == names.end())
        errors.push_back(kernel + ": has no tensor parameter " + name);
  }
  for (auto& [kernel, names] : write_table())
    if (!params.count(kernel)) errors.push_back(kernel + ": not a kernel of kernel_list.h");
  return errors;
}

namespace budget_run {
double flops(const char* kernel, const std::vector<Tensor>& t) {
  if (std::string(kernel) != "matmul" || t.size() != 3 || t[0].dim() != 3) return 0;
  return 2.0 * double(t[2].numel()) * double(t[0].size(2));
}
}  // namespace budget_run

}  // namespace mg::kernels
