// Writes the seed corpora of the fuzz targets:  make_seeds <tests/fuzz/corpus>
// safetensors/: valid files of every dtype, with metadata, a module's state, zero-size and empty
// ones, and a truncated one; state_dict/: one byte naming the optimizer (as fuzz_state_dict.cpp
// reads it) followed by that optimizer's state after a few steps.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <memgrad/memgrad.h>

using namespace mg;

namespace {
std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: make_seeds <corpus folder>\n"), 2;
  const std::string dir = argv[1], st = dir + "/safetensors/", sd = dir + "/state_dict/";
  nn::save_safetensors({{"f32", arange(6, TensorOptions(kFloat32)).view({2, 3})},
                        {"f64", arange(3, TensorOptions(kFloat64))},
                        {"f16", ones({2}, kFloat16)},
                        {"bf16", ones({2}, kBFloat16)},
                        {"i32", tensor(std::vector<int32_t>{7, -8})},
                        {"i64", tensor(std::vector<int64_t>{int64_t(1) << 40})},
                        {"bool", tensor(std::vector<bool>{true, false})}},
                       st + "dtypes", {{"format", "pt"}});
  manual_seed(1);
  nn::save(nn::Linear(4, 3), st + "linear");
  nn::save_safetensors({{"empty", zeros({0, 4})}, {"scalar", scalar_tensor(2.5)}}, st + "zero_size");
  nn::save_safetensors({}, st + "no_tensors", {{"note", "metadata only"}});
  write(st + "truncated", read(st + "dtypes").substr(0, 100));

  const char* names[] = {"sgd_momentum", "sgd", "adam_amsgrad", "adamw"};
  for (int kind = 0; kind < 4; ++kind) {
    std::vector<Tensor> p = {ones({3}).requires_grad_(), ones({2, 2}).requires_grad_()};
    std::unique_ptr<optim::Optimizer> opt;
    if (kind == 0) opt = std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9));
    if (kind == 1) opt = std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1));
    if (kind == 2) opt = std::make_unique<optim::Adam>(p, optim::AdamOptions(0.1).amsgrad());
    if (kind == 3) opt = std::make_unique<optim::AdamW>(p, optim::AdamWOptions(0.1));
    for (int step = 0; step < 2; ++step) {
      opt->zero_grad();
      ((p[0] * p[0]).sum() + p[1].sum()).backward();
      opt->step();
    }
    const std::string tmp = sd + "tmp";
    nn::save_safetensors(opt->state_dict(), tmp);
    write(sd + names[kind], std::string(1, char(kind)) + read(tmp));
    std::remove(tmp.c_str());
  }
  return 0;
}
