// The eight categories of the memory ledger, across one training step of a small GPT (AdamW,
// forward under bfloat16 autocast). Every allocation is charged to a category when it is made:
//
//   Parameter       nn parameters (modules allocate them under MemoryScope(Parameter, <path>))
//   Gradient        .grad buffers (autograd relabels a gradient when it lands in a leaf's .grad)
//   OptimizerState  Adam's moments, SGD's momentum, float32 master weights (made lazily, at step 1)
//   Activation      tensors autograd saved for backward, while saved (an op output that is saved
//                   moves from Temporary to Activation, and back when backward releases it)
//   Temporary       op outputs nobody saved: the loss, the logits you still hold, ...
//   Input           tensors you create with factories (the data: token ids, targets)
//   Workspace       kernel scratch (here: the CPU's float32 buffers for bfloat16 matrix products)
//   Other           everything else: the causal-mask buffers of the attention layers
//
// At every moment the categories sum to the allocated bytes (checked below, and after each event
// in tests/memory/test_ledger.cpp).
//
//   categories      (no arguments)
#include <numeric>
#include <string>
#include <vector>

#include "ledger.h"

int main() {
  mg::manual_seed(0);
  mg::nn::GPTConfig c;
  c.vocab_size = 512, c.block_size = 64, c.n_layer = 2, c.n_head = 4, c.n_embd = 64, c.dropout = 0.1;
  const int64_t batch = 8, seq = 64;

  std::vector<std::pair<std::string, mg::MemoryStats>> moments;
  auto mark = [&](const std::string& name) { moments.emplace_back(name, mg::memory_stats()); };
  mg::reset_peak();
  mark("start");
  mg::nn::GPT model(c);
  mg::optim::AdamW opt(model.named_parameters());
  mark("model built");
  mg::Tensor idx = mg::randint(0, c.vocab_size, {batch, seq}), targets = mg::randint(0, c.vocab_size, {batch, seq});
  mark("data made");
  mg::Tensor loss;
  {
    mg::amp::AutocastGuard guard(mg::kBFloat16);
    loss = model.loss(idx, targets);
  }
  mark("end of forward");
  loss.backward();
  mark("end of backward");
  opt.step();
  mark("after step");
  const mg::MemoryStats end = mg::memory_stats();

  std::printf("GPT (2 layers, n_embd 64, vocab 512), batch %lld x %lld, AdamW, bf16 autocast: bytes per category\n\n",
              (long long)batch, (long long)seq);
  std::printf("%-15s", "category");
  for (auto& [name, s] : moments)
    if (name != "start") std::printf(" %15s", name.c_str());
  std::printf(" %14s %14s\n", "at the peak", "own peak");
  for (int i = 0; i < mg::kNumCategories; ++i) {
    std::printf("%-15s", mg::category_name(mg::Category(i)));
    for (auto& [name, s] : moments)
      if (name != "start") std::printf(" %15lld", (long long)s.by_category[size_t(i)]);
    std::printf(" %14lld %14lld\n", (long long)end.at_peak_by_category[size_t(i)],
                (long long)end.peak_by_category[size_t(i)]);
  }
  std::printf("%-15s", "allocated");
  for (auto& [name, s] : moments)
    if (name != "start") std::printf(" %15lld", (long long)s.allocated);
  std::printf(" %14lld\n\n", (long long)end.peak_allocated);

  // Hand arithmetic: each tensor counts its bytes rounded up to 512.
  auto rounded = [](const mg::Tensor& t) { return int64_t(mg::memory::round_size(t.nbytes())); };
  int64_t params = 0;
  for (auto& [name, p] : model.named_parameters()) params += rounded(p);
  auto at = [&](const char* name) {
    for (auto& [n, s] : moments)
      if (n == name) return s;
    return mg::MemoryStats{};
  };
  bool sums = true;
  for (auto& [name, s] : moments)
    sums = sums && std::accumulate(s.by_category.begin(), s.by_category.end(), int64_t(0)) == s.allocated;
  demo::check(sums, "at every moment the categories sum to the allocated bytes");
  demo::check_bytes(at("model built").category(mg::Category::Parameter), params, "Parameter: every parameter");
  demo::check_bytes(at("model built").category(mg::Category::Other), c.n_layer * c.block_size * c.block_size,
                    "Other: one bool causal mask per layer");
  demo::check_bytes(at("data made").category(mg::Category::Input), rounded(idx) + rounded(targets),
                    "Input: the token ids and targets");
  demo::check_bytes(at("end of forward").category(mg::Category::Gradient), 0, "Gradient: none before backward");
  demo::check_bytes(at("end of backward").category(mg::Category::Gradient), params,
                    "Gradient: one float32 .grad per parameter");
  demo::check_bytes(at("end of backward").category(mg::Category::Activation), 0,
                    "Activation: all released by backward");
  demo::check_bytes(at("after step").category(mg::Category::OptimizerState), 2 * params,
                    "OptimizerState: AdamW's two moments, made at the first step");
  demo::check(end.peak(mg::Category::Workspace) > 0 && at("after step").category(mg::Category::Workspace) == 0,
              "Workspace: used inside the bfloat16 matrix products only");
  return demo::exit_code();
}
