// The GPT: parameter count, names and ledger labels, parity with PyTorch on weights written by
// Python, and training on a text that ships with the OS.
#include <cmath>
#include <fstream>
#include <sstream>

#include "fixtures.h"

using namespace mg;
using mg_test::get;

namespace {
nn::GPTConfig tiny_config() {
  nn::GPTConfig c;
  c.vocab_size = 65, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  return c;
}
}  // namespace

TEST_CASE("GPT-2 124M has 124,439,808 parameters (built on the meta device)") {
  nn::GPTConfig c = nn::GPTConfig::gpt2();
  c.options.device(kMeta);
  int64_t before = memory_stats(kMeta).category(Category::Parameter);
  nn::GPT model(c);
  CHECK(model.num_parameters() == 124439808);
  CHECK(model.parameters().size() == 2 + 12 * 12 + 2);
  // Every parameter is in the ledger under Parameter: sum of its blocks (512-byte rounded).
  int64_t expect = 0;
  for (auto& p : model.parameters()) expect += (int64_t(p.nbytes()) + 511) / 512 * 512;
  CHECK(memory_stats(kMeta).category(Category::Parameter) - before == expect);
  Tensor logits = model(zeros({1, 8}, TensorOptions(kInt64).device(kMeta)));
  CHECK(logits.shape() == Shape{1, 8, 50257});
}

TEST_CASE("GPT: parameter names follow Hugging Face and label the ledger") {
  manual_seed(0);
  nn::GPT model(tiny_config());
  auto named = model.named_parameters();
  CHECK(named[0].first == "wte.weight");
  CHECK(named[1].first == "wpe.weight");
  CHECK(named[2].first == "h.0.ln_1.weight");
  CHECK(named[4].first == "h.0.attn.c_attn.weight");
  CHECK(named.back().first == "ln_f.bias");
  auto owners = memory_by_owner();
  for (auto& [name, p] : named) {
    INFO(name);
    CHECK(owners.count(name) == 1);
    CHECK(p.storage()->category() == Category::Parameter);
    CHECK(p.requires_grad());
  }
  // GPT-2 init: residual projections are scaled down by sqrt(2 n_layer).
  auto stddev = [](const Tensor& t) { return std::sqrt(var(t).item<double>()); };
  CHECK(stddev(model.h->operator[](0).mlp->c_fc->weight) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev(model.h->operator[](0).attn->c_proj->weight) == doctest::Approx(0.01).epsilon(0.1));
  CHECK(model.h->operator[](1).ln_2->weight.to_vector<float>() == std::vector<float>(32, 1.0f));
}

TEST_CASE("GPT: logits, loss and gradients match PyTorch with weights from a Python safetensors file") {
  nn::GPT model(tiny_config());
  nn::Metadata meta;
  nn::load_safetensors(std::string(MG_FIXTURES_DIR) + "/nn_gpt_weights.safetensors", &meta);
  CHECK(meta.at("config").find("\"n_embd\": 32") != std::string::npos);
  nn::load(model, std::string(MG_FIXTURES_DIR) + "/nn_gpt_weights.safetensors");
  auto& io = mg_test::fixture("nn_gpt_io.safetensors");
  Tensor logits = model(get(io, "idx"));
  CHECK_CLOSE(logits, get(io, "logits"), 1e-4, 1e-5);
  Tensor loss = nn::lm_loss(logits, get(io, "targets"));
  CHECK_CLOSE(loss, get(io, "loss"), 1e-5, 1e-6);
  loss.backward();
  for (auto& [name, p] : model.named_parameters()) {
    INFO(name);
    CHECK_CLOSE(p.grad(), get(io, "grad." + name), 1e-3, 1e-6);
  }
}

TEST_CASE("Module: to(dtype) keeps identities and ties; zero_grad; train/eval") {
  manual_seed(1);
  nn::GPT model(tiny_config());
  Tensor wte = model.wte->weight;
  model.loss(randint(0, 65, {1, 4}), randint(0, 65, {1, 4})).backward();
  CHECK(wte.grad().defined());
  model.zero_grad(false);
  CHECK(wte.grad().abs().sum().item<double>() == 0.0);
  model.zero_grad();
  CHECK_FALSE(wte.grad().defined());
  auto before = model.state_dict();
  int64_t param_bytes = memory_stats().category(Category::Parameter);
  model.to(kFloat64);
  CHECK(wte.dtype() == kFloat64);
  CHECK(wte.is_same(model.wte->weight));
  CHECK(memory_by_owner().count("wte.weight") == 1);
  // float64 doubles the parameter bytes (each tensor rounded to 512-byte blocks)
  CHECK(memory_stats().category(Category::Parameter) > param_bytes);
  for (auto& [name, t] : model.state_dict()) CHECK(allclose(t, before.at(name)));
  CHECK(model(randint(0, 65, {1, 4})).dtype() == kFloat64);
  model.eval();
  CHECK_FALSE(model.h->operator[](1).mlp->drop->is_training());
  model.train();
  CHECK(model.drop->is_training());
}

TEST_CASE("GPT: a tiny model learns a text that ships with the OS, well below its unigram entropy") {
  std::string text;
  for (const char* path : {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/GPL-2"}) {
    std::ifstream f(path);
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str();
      break;
    }
  }
  if (text.empty()) text = std::string(MG_FIXTURES_DIR);  // never empty: fall back below
  REQUIRE(text.size() > 10000);
  // Character-level vocabulary and the unigram entropy (nats) of the text.
  std::vector<int64_t> id(256, -1), counts;
  std::vector<int64_t> tokens;
  for (unsigned char ch : text) {
    if (id[ch] < 0) id[ch] = int64_t(counts.size()), counts.push_back(0);
    counts[size_t(id[ch])]++;
    tokens.push_back(id[ch]);
  }
  double entropy = 0;
  for (auto c : counts) {
    double p = double(c) / double(tokens.size());
    entropy -= p * std::log(p);
  }
  MESSAGE("unigram entropy ", entropy, " nats over ", counts.size(), " symbols");

  manual_seed(42);
  nn::GPTConfig c;
  c.vocab_size = int64_t(counts.size()), c.block_size = 32, c.n_layer = 2, c.n_head = 4, c.n_embd = 64;
  nn::GPT model(c);
  optim::AdamW opt(model.named_parameters(), optim::AdamWOptions().lr(3e-3).weight_decay(0.01));
  const int64_t B = 16, T = c.block_size, steps = 150;
  optim::WarmupCosineLR sched(opt, 10, steps, 0.1);
  double last = 0;
  for (int64_t s = 0; s < steps; ++s) {
    Tensor starts = randint(0, int64_t(tokens.size()) - T - 1, {B});
    std::vector<int64_t> x, y;
    for (auto st : starts.to_vector<int64_t>())
      for (int64_t t = 0; t < T; ++t) x.push_back(tokens[size_t(st + t)]), y.push_back(tokens[size_t(st + t + 1)]);
    Tensor loss = model.loss(tensor(x, {B, T}), tensor(y, {B, T}));
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    sched.step();
    last = s == 0 ? loss.item<double>() : 0.9 * last + 0.1 * loss.item<double>();
  }
  MESSAGE("smoothed training loss after ", steps, " steps: ", last);
  CHECK(last < entropy - 0.5);
}
