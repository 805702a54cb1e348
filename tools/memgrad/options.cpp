#include "options.h"

#include <cmath>
#include <cstdio>
#include <map>

namespace memgrad_cli {

namespace {
struct Preset {
  int64_t n_layer, n_head, n_embd, vocab, block;  // block 0: the sequence length
};
// GPT-2's published sizes, and a tiny one that trains on two CPU cores in a minute.
const std::map<std::string, Preset> kPresets = {{"tiny", {4, 4, 128, 256, 0}},
                                                {"gpt2-124m", {12, 12, 768, 50257, 1024}},
                                                {"gpt2-350m", {24, 16, 1024, 50257, 1024}},
                                                {"gpt2-774m", {36, 20, 1280, 50257, 1024}},
                                                {"gpt2-1.5b", {48, 25, 1600, 50257, 1024}}};

// Accepts none, sqrt, selective, auto and every-K with K >= 1.
std::string check_policy(const std::string& v) {
  if (v == "none" || v == "sqrt" || v == "selective" || v == "auto") return {};
  if (v.rfind("every-", 0) == 0) {
    const std::string k = v.substr(6);
    if (!k.empty() && k.size() <= 9 && k.find_first_not_of("0123456789") == std::string::npos && std::stoll(k) >= 1)
      return {};
  }
  return "expected none, every-K (K >= 1 blocks per segment), sqrt, selective or auto, got '" + v + "'";
}
}  // namespace

void add_model_flags(CLI::App& app, ModelFlags& m) {
  app.add_option("--model", m.model,
                 "tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, custom (tiny + the size flags) or mlp")
      ->check(CLI::IsMember({"tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b", "custom", "mlp"}))
      ->capture_default_str();
  app.add_option("--n-layer", m.n_layer, "GPT blocks (overrides the preset)")->check(CLI::PositiveNumber);
  app.add_option("--n-head", m.n_head, "GPT attention heads (overrides the preset)")->check(CLI::PositiveNumber);
  app.add_option("--n-embd", m.n_embd, "GPT width (overrides the preset)")->check(CLI::PositiveNumber);
  app.add_option("--vocab", m.vocab, "GPT vocabulary size (overrides the preset)")->check(CLI::PositiveNumber);
  app.add_option("--layers", m.layers, "mlp: Linear+ReLU blocks")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--width", m.width, "mlp: features per layer")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--dropout", m.dropout, "GPT dropout probability")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--attention", m.attention,
                 "GPT attention core: composed (matmul, mask, softmax, dropout, matmul: keeps the [T, T] "
                 "probabilities) or fused (one op that keeps a log-sum-exp per row)")
      ->check(CLI::IsMember({"composed", "fused"}))
      ->capture_default_str();
}

void add_step_flags(CLI::App& app, StepFlags& s) {
  app.add_option("-b,--batch", s.batch, "sequences (mlp: rows) per micro-batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-t,--seq", s.seq, "GPT sequence length (and block size)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--optimizer", s.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  app.add_option("--momentum", s.momentum, "sgd momentum (state: one buffer per parameter when > 0)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--precision", s.precision,
                 "fp32; fp16 or bf16: autocast (float32 parameters, gradients and optimizer state, matmuls on half "
                 "copies); fp16-storage or bf16-storage: the model stored in half (parameters, gradients, "
                 "activations) and the optimizer updating float32 master weights. fp16 modes scale the loss")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "fp16-storage", "bf16-storage"}))
      ->capture_default_str();
  app.add_option("--checkpoint", s.checkpoint,
                 "recompute-on-backward: none, every-K (K blocks per segment), sqrt, selective (attention core) "
                 "or auto (the planner's DP for --budget)")
      ->check(check_policy)
      ->capture_default_str();
  app.add_option("--accum", s.accum, "gradient accumulation: micro-batches per optimizer step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--clip", s.clip, "clip the gradient norm to this (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--budget", s.budget,
                 "memory budget (reserved bytes: a --memory-limit the steps must run under) for --checkpoint auto "
                 "and batch search, e.g. 512MiB or 80GB")
      ->transform(CLI::AsSizeValue(true));
}

mg::plan::ModelSpec model_spec(const ModelFlags& m, int64_t seq) {
  if (m.model == "mlp") return mg::plan::ModelSpec::mlp(m.layers, m.width);
  Preset p = kPresets.at(m.model == "custom" ? "tiny" : m.model);
  mg::nn::GPTConfig c;
  c.n_layer = m.n_layer ? m.n_layer : p.n_layer;
  c.n_head = m.n_head ? m.n_head : p.n_head;
  c.n_embd = m.n_embd ? m.n_embd : p.n_embd;
  c.vocab_size = m.vocab ? m.vocab : p.vocab;
  c.block_size = p.block ? p.block : seq;
  if (seq > c.block_size)
    throw UsageError("--seq " + std::to_string(seq) + " exceeds " + m.model + "'s " + std::to_string(c.block_size) +
                     " positions");
  c.dropout = m.dropout;
  c.fused_attention = m.attention == "fused";
  if (c.n_embd % c.n_head != 0)
    throw UsageError("--n-embd " + std::to_string(c.n_embd) + " must be a multiple of --n-head " +
                     std::to_string(c.n_head));
  return mg::plan::ModelSpec::gpt_model(c);
}

std::string model_str(const mg::plan::ModelSpec& spec) {
  if (spec.kind == mg::plan::ModelSpec::Kind::MLP)
    return "MLP of " + std::to_string(spec.mlp_layers) + " Linear(" + std::to_string(spec.mlp_width) + ", " +
           std::to_string(spec.mlp_width) + ")+ReLU blocks";
  const auto& c = spec.gpt;
  return "GPT n_layer " + std::to_string(c.n_layer) + ", n_head " + std::to_string(c.n_head) + ", n_embd " +
         std::to_string(c.n_embd) + ", vocab " + std::to_string(c.vocab_size) + ", block " +
         std::to_string(c.block_size) + (c.fused_attention ? ", fused attention" : "");
}

mg::plan::StepOptions step_options(const StepFlags& s) {
  using mg::plan::OptimizerKind;
  mg::plan::StepOptions o;
  o.accum = s.accum;
  o.clip_norm = s.clip;
  o.precision = mg::plan::parse_precision(s.precision);
  o.grad_scaler = s.precision.rfind("fp16", 0) == 0;
  o.optimizer = s.optimizer == "sgd"    ? (s.momentum > 0 ? OptimizerKind::SGDMomentum : OptimizerKind::SGD)
                : s.optimizer == "adam" ? OptimizerKind::Adam
                                        : OptimizerKind::AdamW;
  return o;
}

mg::plan::InputShape input_shape(const StepFlags& s) { return {s.batch, s.seq}; }

mg::plan::Policy policy(const StepFlags& s, const mg::plan::ModelSpec& spec, bool table,
                        const mg::plan::PlanOptions& plan_options) {
  using mg::plan::Policy;
  const int64_t n = spec.num_blocks();
  const std::string& c = s.checkpoint;
  if (c == "none") return Policy::none();
  if (c == "sqrt") return Policy::sqrt_n(n);
  if (c == "selective") return Policy::selective_only();
  if (c == "auto") {
    if (!s.budget) throw UsageError("--checkpoint auto needs --budget (e.g. --budget 256MiB)");
    const int64_t budget = int64_t(s.budget);
    auto rows = mg::plan::choose_segments(spec, input_shape(s), step_options(s), budget, plan_options);
    if (table)
      std::printf("checkpoint segments chosen for the budget (planned on meta):\n%s\n",
                  mg::plan::choice_table(rows, budget).c_str());
    if (auto best = mg::plan::best_fit(rows)) {
      if (table)
        std::printf("--checkpoint auto: %s (%s), the plan that runs under the budget with the least recompute\n\n",
                    best->method.c_str(), best->policy.str().c_str());
      return best->policy;
    }
    // None fits: the least memory any of them needs.
    const mg::plan::ChoiceRow* least = nullptr;
    int64_t least_limit = 0;
    for (const auto& r : rows) {
      const int64_t limit =
          mg::plan::plan(spec, input_shape(s), step_options(s), r.policy, plan_options).smallest_limit;
      if (!least || limit < least_limit) least = &r, least_limit = limit;
    }
    throw mg::OutOfMemoryError(
        "--checkpoint auto: no plan runs under the budget of " + mg::format_bytes(budget) + " (" +
        std::to_string(budget) + " B); the least, " + least->method + " (" + least->policy.str() +
        "), needs a memory limit of " + mg::format_bytes(least_limit) + " (" + std::to_string(least_limit) +
        " B). Try a smaller --batch, --accum" +
        (s.precision.find("storage") == std::string::npos ? " or --precision bf16-storage" : "") + ".");
  }
  const int64_t k = std::stoll(c.substr(6));  // every-K
  if (k > n) throw UsageError("--checkpoint " + c + ": the model has only " + std::to_string(n) + " blocks");
  Policy p{"every " + std::to_string(k), {}, false};
  for (int64_t b = 0; b < n; b += k) p.segments.push_back({b, std::min(n, b + k)});
  return p;
}

int64_t parameter_count(const mg::plan::ModelSpec& spec) {
  return mg::plan::ChainModel(spec, mg::kMeta).module().num_parameters();
}

std::string thousands(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = int(s.size()) - 3; i > (n < 0 ? 1 : 0); i -= 3) s.insert(size_t(i), ",");
  return s;
}

}  // namespace memgrad_cli
