// Parameter initialisers. Each fills its tensor in place (no history, no temporary copy) from
// the counter-based `generator` (the default generator when null), and returns it.
#pragma once
#include <string>

#include <memgrad/core/random.h>
#include <memgrad/core/tensor.h>

namespace mg::nn {
class Module;
}

namespace mg::nn::init {

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity { Linear, ReLU, LeakyReLU, Tanh, Sigmoid };

double calculate_gain(Nonlinearity nl, double negative_slope = 0.01);
// PyTorch's fans: dim 1 (times the receptive field) is fan_in, dim 0 is fan_out.
std::pair<int64_t, int64_t> fans(const Tensor& t);

Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
Tensor& constant_(Tensor& t, double value);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
Tensor& uniform_(Tensor& t, double lo = 0.0, double hi = 1.0, Generator* generator = nullptr);
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* generator = nullptr);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* generator = nullptr);
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                         Nonlinearity nl = Nonlinearity::LeakyReLU, Generator* generator = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nl = Nonlinearity::LeakyReLU, Generator* generator = nullptr);

// GPT-2's scheme: every Linear and Embedding weight ~ N(0, 0.02), biases 0, LayerNorm weight 1 and
// bias 0, and weights whose name ends in `residual_suffix` (the projections that write into the
// residual stream) ~ N(0, 0.02 / sqrt(2 * n_layer)).
void gpt2_init_(Module& model, int64_t n_layer, const std::string& residual_suffix = "c_proj.weight");

}  // namespace mg::nn::init
