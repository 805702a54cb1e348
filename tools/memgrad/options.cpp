#include "options.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

#include <CLI/CLI.hpp>

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

template <class T>
std::optional<T> parse_integer(const std::string& text) {
  const char* begin = text.data() + (text.size() > 1 && text[0] == '-' && std::is_unsigned_v<T>);  // "-0" is 0
  T v{};
  auto [end, ec] = std::from_chars(begin, text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (begin != text.data() && v != 0) return std::nullopt;  // a negative value for an unsigned type
  return v;
}
template std::optional<int64_t> parse_integer<int64_t>(const std::string&);
template std::optional<uint64_t> parse_integer<uint64_t>(const std::string&);

namespace {
bool is_integer_text(const std::string& s) {
  const size_t digits = s.size() > 1 && s[0] == '-' ? 1 : 0;
  return s.size() > digits && s.find_first_not_of("0123456789", digits) == std::string::npos;
}

template <class T>
CLI::Validator integer_validator(T lo, T hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        if (!is_integer_text(s)) return "expected an integer, got '" + s + "'";
        const std::optional<T> v = parse_integer<T>(s);
        if (!v || *v < lo || *v > hi) return "expected an integer in " + range + ", got " + s;
        s = std::to_string(*v);  // CLI11 converts in base 0: "010" would be octal
        return {};
      },
      "INT in " + range);
}

std::string readable(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) { return integer_validator<int64_t>(lo, hi); }
CLI::Validator any_uint64() { return integer_validator<uint64_t>(0, UINT64_MAX); }

CLI::Validator number_in(double lo, double hi, bool open) {
  const std::string range = std::isinf(hi) ? (open ? "> " : ">= ") + readable(lo)
                                           : (open ? "in (" : "in [") + readable(lo) + ", " + readable(hi) + "]";
  return CLI::Validator(
      [lo, hi, open, range](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        // decimal notation only, as the integer flags take it: strtod also reads hex (0x10) and leading spaces
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) ||
            s.find_first_not_of("0123456789+-.eE") != std::string::npos)
          return "expected a finite number " + range + ", got '" + s + "'";
        if ((open ? !(v > lo) : !(v >= lo)) || !(v <= hi)) return "expected a number " + range + ", got " + s;
        return {};
      },
      "NUMBER " + range);
}

CLI::Option* byte_size(CLI::Option* option) {
  // Runs before AsSizeValue (a transform added later runs earlier), which would wrap -1 and
  // clamp 99999999999999999999; its own overflow check covers the unit's factor.
  auto digits = [](std::string& s) -> std::string {
    const size_t n = s.find_first_not_of("0123456789");
    const bool unit_only = n == std::string::npos || std::all_of(s.begin() + ptrdiff_t(n), s.end(),
                                                                 [](char c) { return std::isalpha(c) || c == ' '; });
    if (n == 0 || !unit_only || !parse_integer<uint64_t>(s.substr(0, n)))
      return "expected a byte count such as 1073741824, 512MiB or 80GB, got '" + s + "'";
    return {};
  };
  // 0 is refused: it meant none (no limit, no budget) where a size was given, and 0 bytes for a cap.
  auto below_2_63 = [](const std::string& s) -> std::string {
    const auto v = parse_integer<uint64_t>(s);
    if (v && *v == 0) return "expected a byte count > 0, got 0";
    return v && *v <= uint64_t(INT64_MAX) ? std::string() : "expected a byte count below 8 EiB, got " + s;
  };
  return option->transform(CLI::AsSizeValue(true))->transform(CLI::Validator(digits, ""))->check(below_2_63);
}

void check_writable(const char* flag, const std::string& path) {
  std::string file;
  try {
    file =
        mg::output_file(path, flag);  // core/files.h: a regular file, a link to one, or a new name in a writable folder
  } catch (const mg::IOError& e) {
    throw UsageError(e.what());
  }
  // access() says yes to root nearly everywhere: the temporary file the write makes beside the target is
  // made (and removed) now, so that a folder that refuses it (sysfs, an immutable folder) stops the command
  // before the work, not after it.
  const std::string probe = file + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 && errno != EEXIST)
    throw UsageError(std::string(flag) + " '" + path + "': cannot create a file beside it: " + std::strerror(errno));
  if (fd >= 0) ::close(fd), ::unlink(probe.c_str());
}

CLI::Validator non_empty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) -> std::string { return s.empty() ? "expected " + what + ", got an empty value" : ""; },
      "");
}

CLI::Validator input_file() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty()) return "expected a file name, got an empty value";
        try {
          mg::InputFile(s, "");  // a regular file: opened without blocking, then closed
          return {};
        } catch (const mg::IOError& e) {
          return e.what();
        }
      },
      "FILE");
}

void add_model_flags(CLI::App& app, ModelFlags& m) {
  app.add_option("--model", m.model,
                 "tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, custom (tiny + the size flags) or mlp")
      ->check(CLI::IsMember({"tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b", "custom", "mlp"}))
      ->capture_default_str();
  app.add_option("--n-layer", m.n_layer, "GPT blocks (overrides the preset)")->transform(integer_in(1, kMaxCount));
  app.add_option("--n-head", m.n_head, "GPT attention heads (overrides the preset)")
      ->transform(integer_in(1, kMaxCount));
  app.add_option("--n-embd", m.n_embd, "GPT width (overrides the preset)")->transform(integer_in(1, kMaxCount));
  app.add_option("--vocab", m.vocab, "GPT vocabulary size (overrides the preset)")->transform(integer_in(1, kMaxCount));
  app.add_option("--layers", m.layers, "mlp: Linear+ReLU blocks")
      ->transform(integer_in(1, kMaxCount))
      ->capture_default_str();
  app.add_option("--width", m.width, "mlp: features per layer")
      ->transform(integer_in(1, kMaxCount))
      ->capture_default_str();
  app.add_option("--dropout", m.dropout, "GPT dropout probability")
      ->transform(number_in(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--attention", m.attention,
                 "GPT attention core: composed (matmul, mask, softmax, dropout, matmul: keeps the [T, T] "
                 "probabilities) or fused (one op that keeps a log-sum-exp per row)")
      ->check(CLI::IsMember({"composed", "fused"}))
      ->capture_default_str();
  app.add_option("--fuse", m.fuse,
                 "GPT block's element-wise chains as fused ops (scale + mask + softmax, residual add + layer "
                 "norm, bias + dropout + residual add): on, or off for the single ops")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

void add_step_flags(CLI::App& app, StepFlags& s) {
  app.add_flag("--expandable-segments", s.expandable_segments,
               "the allocator grows one segment per pool by mapping 2 MiB pages, instead of adding segments "
               "(PyTorch's expandable_segments:True; MG_ALLOC_CONF=expandable_segments:True does the same)");
  app.add_option("-b,--batch", s.batch, "sequences (mlp: rows) per micro-batch")
      ->transform(integer_in(1, kMaxCount))
      ->capture_default_str();
  app.add_option("-t,--seq", s.seq, "GPT sequence length (and block size)")
      ->transform(integer_in(1, kMaxCount))
      ->capture_default_str();
  std::string optimizers;  // "sgd (...), adam, ... or lion (...)"
  const std::vector<mg::optim::OptimizerEntry>& entries = mg::optim::optimizers();
  for (size_t i = 0; i < entries.size(); ++i)
    optimizers += (i == 0 ? "" : i + 1 == entries.size() ? " or " : ", ") + entries[i].help;
  app.add_option("--optimizer", s.optimizer, optimizers)
      ->check(CLI::IsMember(mg::optim::optimizer_names()))
      ->capture_default_str();
  app.add_flag("--step-in-backward", s.step_in_backward,
               "step each parameter inside backward as soon as its gradient is complete, and free that gradient "
               "(with --clip or fp16's loss scaling and --accum 1, forward and backward run twice: docs/memory.md)");
  app.add_option("--momentum", s.momentum, "sgd momentum (state: one buffer per parameter when > 0)")
      ->transform(number_in(0.0, 1.0))
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
      ->transform(integer_in(1, kMaxCount))
      ->capture_default_str();
  app.add_option("--clip", s.clip, "clip the gradient norm to this (0: off)")
      ->transform(number_in(0.0, INFINITY))
      ->capture_default_str();
  byte_size(app.add_option("--budget", s.budget,
                           "memory budget (reserved bytes: a --memory-limit the steps must run under) for "
                           "--checkpoint auto and batch search, e.g. 512MiB or 80GB"));
  app.add_option("--num-workers", s.num_workers,
                 "data loader threads reading batches ahead in the background (0: the training thread reads them)")
      ->transform(integer_in(0, 256))
      ->capture_default_str();
  app.add_option("--prefetch", s.prefetch, "batches each data loader thread reads ahead (held for the whole run)")
      ->transform(integer_in(1, 1024))
      ->capture_default_str();
  app.add_flag("--pin-memory", s.pin_memory,
               "cuda: the data loader's host buffers page-locked, and batches copied to the device on a side stream "
               "while the step before runs");
}

void add_data_parallel_flags(CLI::App& app, StepFlags& s) {
  app.add_option("--zero", s.zero,
                 "data parallelism: ZeRO stage 0 (all-reduce gradients), 1 (shard optimizer state), 2 (shard "
                 "gradients too) or 3 (shard the parameters: each block gathered for its forward and backward only); "
                 "train runs the ranks mpirun starts")
      ->transform(integer_in(0, 3))
      ->capture_default_str();
  app.add_flag("!--no-unit-prefetch", s.unit_prefetch,
               "--zero 3 and --offload params: gather each block only when it runs, not while the one before runs "
               "(shows what prefetching hides)");
  byte_size(app.add_option("--bucket-cap", s.bucket_cap, "data parallelism: gradient bucket size, e.g. 25MiB"));
}

mg::train::ModelSpec model_spec(const ModelFlags& m, int64_t seq) {
  if (m.model == "mlp") return mg::train::ModelSpec::mlp(m.layers, m.width);
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
  c.fused_elementwise = m.fuse == "on";
  if (c.n_embd % c.n_head != 0)
    throw UsageError("--n-embd " + std::to_string(c.n_embd) + " must be a multiple of --n-head " +
                     std::to_string(c.n_head));
  return mg::train::ModelSpec::gpt_model(c);
}

std::string model_str(const mg::train::ModelSpec& spec) {
  if (spec.kind == mg::train::ModelSpec::Kind::MLP)
    return "MLP of " + std::to_string(spec.mlp_layers) + " Linear(" + std::to_string(spec.mlp_width) + ", " +
           std::to_string(spec.mlp_width) + ")+ReLU blocks";
  const auto& c = spec.gpt;
  return "GPT n_layer " + std::to_string(c.n_layer) + ", n_head " + std::to_string(c.n_head) + ", n_embd " +
         std::to_string(c.n_embd) + ", vocab " + std::to_string(c.vocab_size) + ", block " +
         std::to_string(c.block_size) + (c.fused_attention ? ", fused attention" : "") +
         (c.fused_elementwise ? "" : ", unfused element-wise ops");
}

mg::train::StepOptions step_options(const StepFlags& s) {
  mg::train::StepOptions o;
  o.accum = s.accum;
  o.clip_norm = s.clip;
  o.precision = mg::train::parse_precision(s.precision);
  o.grad_scaler = s.precision.rfind("fp16", 0) == 0;
  o.world_size = s.world_size, o.rank = s.rank, o.zero_stage = s.zero, o.bucket_bytes = int64_t(s.bucket_cap);
  o.offload_params = s.offload_params, o.unit_prefetch = s.unit_prefetch;
  const mg::optim::OptimizerEntry& optimizer = mg::optim::optimizer_entry(s.optimizer);
  o.optimizer = mg::optim::OptimizerSpec(s.optimizer, optimizer.has_momentum ? s.momentum : 0);
  o.step_in_backward = s.step_in_backward;
  // ZeRO's shards cut parameters: into flat slices (stages 1-2), into 1-D pieces of flat chunks (stage 3 and
  // --offload params). An element-wise update takes them as they are; other state needs more (optim/registry.h).
  const int stage = o.sharding_stage();
  if (!optimizer.runs_sharded(stage))
    throw UsageError("--optimizer " + s.optimizer + " does not run under " +
                     (s.offload_params ? std::string("--offload params") : "--zero " + std::to_string(s.zero)) + ": " +
                     optimizer.why_not_sharded(stage) + "; use " + mg::optim::optimizer_names_at(stage));
  if (o.step_in_backward && o.data_parallel())
    throw UsageError(
        "--step-in-backward does not run with data parallelism (--zero, several processes, --offload params): a "
        "parameter could be stepped only once its gradient bucket's reduction or its unit's copy had finished");
  return o;
}

mg::train::InputShape input_shape(const StepFlags& s) { return {s.batch, s.seq}; }

mg::data::DataLoaderOptions loader_options(const StepFlags& s, const mg::Device& device) {
  const bool cuda = device.is_cuda() || (device.is_meta() && mg::meta_target() == mg::DeviceType::CUDA);
  if (s.pin_memory && !cuda)
    throw UsageError("--pin-memory page-locks host memory for copies to a GPU; the batches stay on the cpu here");
  return mg::data::DataLoaderOptions(s.batch)
      .drop_last()
      .num_workers(s.num_workers)
      .prefetch(s.prefetch)
      .pin_memory(s.pin_memory)
      .device(device);
}

std::pair<mg::data::Field, mg::data::Field> example_fields(const mg::train::ModelSpec& spec, const StepFlags& s) {
  if (spec.kind == mg::train::ModelSpec::Kind::MLP)
    return {{{spec.mlp_width}, mg::kFloat32}, {{spec.mlp_width}, mg::kFloat32}};
  return {{{s.seq}, mg::kInt64}, {{s.seq}, mg::kInt64}};
}

mg::plan::Program train_program(const mg::train::ModelSpec& spec, const StepFlags& s) {
  const mg::plan::Program model = mg::plan::program(spec, input_shape(s), step_options(s));
  const int64_t n = spec.kind == mg::train::ModelSpec::Kind::MLP ? spec.mlp_width : 0;
  const auto fields = example_fields(spec, s);
  return [model, n, fields, s](const mg::plan::StepContext& ctx) -> mg::plan::Step {
    auto teacher = std::make_shared<mg::Tensor>();
    if (n && (ctx.device.is_cpu() || (ctx.device.is_meta() && mg::meta_target() == mg::DeviceType::CPU))) {
      mg::MemoryScope scope(mg::Category::Input, "data.teacher");
      *teacher = mg::empty({n, n}, mg::TensorOptions().device(ctx.device));
    }
    auto loader = std::make_shared<std::vector<mg::data::Example>>(
        mg::data::plan_buffers(fields.first, fields.second, loader_options(s, ctx.device), ctx.device));
    const mg::plan::Step step = model(ctx);
    return [teacher, loader, step] { step(); };
  };
}

mg::train::Policy policy(const StepFlags& s, const mg::train::ModelSpec& spec, bool table,
                         const mg::plan::PlanOptions& plan_options) {
  using mg::train::Policy;
  const int64_t n = spec.num_blocks();
  const std::string& c = s.checkpoint;
  if (c == "auto") {
    if (!s.budget) throw UsageError("--checkpoint auto needs --budget (e.g. --budget 256MiB)");
    const int64_t budget = int64_t(s.budget);
    auto rows =
        mg::plan::choose_segments(train_program(spec, s), mg::plan::context(input_shape(s)), budget, plan_options);
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
          mg::plan::plan(train_program(spec, s), mg::plan::context(input_shape(s), r.policy), plan_options)
              .smallest_limit;
      if (!least || limit < least_limit) least = &r, least_limit = limit;
    }
    mg::plan::PlanOptions under = plan_options;  // where the least fails under the budget: its forensics
    under.memory_limit = budget, under.smallest_limit = false;
    const auto failed = mg::plan::plan(train_program(spec, s), mg::plan::context(input_shape(s), least->policy), under);
    throw mg::OutOfMemoryError(
        "--checkpoint auto: no plan runs under the budget of " + mg::format_bytes(budget) + " (" +
            std::to_string(budget) + " B); the least, " + least->method + " (" + least->policy.str() +
            "), needs a memory limit of " + mg::format_bytes(least_limit) + " (" + std::to_string(least_limit) +
            " B). Try a smaller --batch, --accum" +
            (s.precision.find("storage") == std::string::npos ? " or --precision bf16-storage" : "") +
            ". Where it runs out of memory under the budget, planned on meta:",
        failed.oom_fragmentation);
  }
  try {
    return Policy::parse(c, n);
  } catch (const mg::ValueError& e) {  // "checkpoint every-20: the model has only 12 blocks"
    throw UsageError("--" + std::string(e.what()));
  }
}

int64_t parameter_count(const mg::train::ModelSpec& spec) {
  return mg::train::ChainModel(spec, mg::kMeta).module().num_parameters();
}

std::string thousands(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = int(s.size()) - 3; i > (n < 0 ? 1 : 0); i -= 3) s.insert(size_t(i), ",");
  return s;
}

}  // namespace memgrad_cli
