// libFuzzer target: an optimizer's load_state_dict on a state read from arbitrary safetensors
// bytes (the seeds are real SGD, Adam and AdamW states; AdamW8bit and Adafactor read them too). The
// first byte picks the optimizer. A refused dict must raise mg::Error and change nothing; an
// accepted one must round-trip through state_dict and allow a step. Built with -DMG_FUZZ=ON
// (clang); tests/fuzz/README.md.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

#include "fuzz_util.h"

namespace {
// Two parameters of the shapes the seeds were written for ([3] and [2, 2]), with gradients.
std::unique_ptr<mg::optim::Optimizer> make(uint8_t kind, std::vector<mg::Tensor>& params) {
  params = {mg::ones({3}).requires_grad_(), mg::ones({2, 2}).requires_grad_()};
  for (auto& p : params) p.set_grad(mg::full(p.shape(), 0.5));
  using namespace mg::optim;
  switch (kind % 6) {
    case 0:
      return std::make_unique<SGD>(params, SGDOptions(0.1).momentum(0.9));
    case 1:
      return std::make_unique<SGD>(params, SGDOptions(0.1));
    case 2:
      return std::make_unique<Adam>(params, AdamOptions(0.1).amsgrad());
    case 4:  // 8-bit state (codes and absmax) for both parameters
      return std::make_unique<AdamW8bit>(params, AdamW8bitOptions(0.1).min_8bit_size(1));
    case 5:  // factored state for the matrix, a first moment for both
      return std::make_unique<Adafactor>(params, AdafactorOptions(0.1).beta1(0.9));
    default:
      return std::make_unique<AdamW>(params, AdamWOptions(0.1));
  }
}

std::map<std::string, std::vector<double>> contents(const mg::optim::Optimizer& o) {
  std::map<std::string, std::vector<double>> r;
  for (auto& [k, t] : o.state_dict()) r[k] = t.to_vector<double>();
  return r;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string path = mg_fuzz::scratch_path("state_dict");
  mg_fuzz::write_file(path, data + 1, size - 1);
  std::vector<mg::Tensor> params;
  auto opt = make(data[0], params);
  const int64_t before = mg::memory_stats(mg::kCPU).allocated;
  mg::nn::StateDict dict;
  try {
    dict = mg::nn::load_safetensors(path);
  } catch (const mg::Error&) {
    return 0;
  }
  const auto unchanged = contents(*opt);
  try {
    opt->load_state_dict(dict);
  } catch (const mg::Error&) {
    mg_fuzz::require(contents(*opt) == unchanged, "a refused state_dict changed the optimizer");
    dict.clear();
    mg_fuzz::require(mg::memory_stats(mg::kCPU).allocated == before, "a refused state_dict left bytes behind");
    return 0;
  }
  const auto loaded = contents(*opt);
  std::vector<mg::Tensor> other;
  auto again = make(data[0], other);
  again->load_state_dict(opt->state_dict());  // what an optimizer accepted and wrote, it accepts back
  mg_fuzz::require(contents(*again) == loaded, "state_dict did not round-trip");
  opt->step();
  return 0;
}
