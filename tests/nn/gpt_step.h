// A step of a tiny GPT, shared by the fused-op tests (defined in test_fused.cpp).
#pragma once
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <memgrad/memgrad.h>

// One loss and backward of a tiny GPT (seed 3) configured by `configure`: the loss, the parameters
// with their gradients, the Activation bytes after forward and the peak over the step.
std::tuple<double, std::vector<std::pair<std::string, mg::Tensor>>, int64_t, int64_t> gpt_step(
    const std::function<void(mg::nn::GPTConfig&)>& configure);
