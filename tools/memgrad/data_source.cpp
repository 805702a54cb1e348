#include "data_source.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "corpus.h"
#include "train.h"

namespace memgrad_cli {

namespace {

constexpr int64_t kEvalBatches = 20;  // held-out batches evaluated at the end, at most (llm.c's default)

// The MLP's data: x ~ N(0, 1) and relu(x A) for a fixed random A (the teacher, [width, width]
// float32 on the cpu, Input owned by "data.teacher"); row i is drawn from (seed, i) alone.
class Teacher : public mg::data::Dataset {
 public:
  Teacher(int64_t width, uint64_t seed) : n_(width), seed_(seed) {
    {
      mg::MemoryScope scope(mg::Category::Input, "data.teacher");
      teacher_ = mg::empty({n_, n_});
    }
    std::mt19937_64 rng(seed ^ 0x7eac4e5ULL);
    std::normal_distribution<float> normal(0.f, 1.f / std::sqrt(float(n_)));
    float* w = teacher_.data_ptr<float>();
    for (int64_t i = 0; i < n_ * n_; ++i) w[i] = normal(rng);
    w_ = w;
  }
  int64_t size() const override { return kMaxCount; }
  mg::data::Field data_field() const override { return {{n_}, mg::kFloat32}; }
  mg::data::Field target_field() const override { return {{n_}, mg::kFloat32}; }
  void read(int64_t index, void* data, void* target) const override {
    std::seed_seq key{uint32_t(seed_), uint32_t(seed_ >> 32), uint32_t(index), uint32_t(uint64_t(index) >> 32)};
    std::mt19937_64 rng(key);
    std::normal_distribution<float> normal(0.f, 1.f);
    auto* x = static_cast<float*>(data);
    auto* y = static_cast<float*>(target);
    const float* w = w_;
    for (int64_t j = 0; j < n_; ++j) x[j] = normal(rng);
    for (int64_t i = 0; i < n_; ++i) {
      float acc = 0;
      for (int64_t j = 0; j < n_; ++j) acc += x[j] * w[j * n_ + i];
      y[i] = std::max(acc, 0.f);
    }
  }

 private:
  int64_t n_;
  uint64_t seed_;
  mg::Tensor teacher_;
  const float* w_ = nullptr;  // its values, read by the loader's workers
};

std::shared_ptr<const mg::data::Tokens> open_tokens(const char* flag, const std::string& path) {
  try {
    return mg::data::Tokens::open(path);
  } catch (const mg::Error& e) {
    throw UsageError(std::string(flag) + " " + e.what());
  }
}

std::string plural(int64_t n, const char* one) { return std::to_string(n) + " " + one + (n == 1 ? "" : "s"); }

void print_loader_memory(const mg::data::DataLoaderOptions& o, const mg::data::BufferBytes& b, const char* note) {
  const mg::data::BufferCounts c = mg::data::buffer_counts(o);
  if (!c.host && !c.staging) return;
  std::printf("data loader (--num-workers %lld, --prefetch %lld%s): %lld host and %lld device batch buffers%s\n",
              static_cast<long long>(o.num_workers_), static_cast<long long>(o.prefetch_),
              c.pinned ? ", --pin-memory" : "", static_cast<long long>(c.host), static_cast<long long>(c.staging),
              note);
  auto line = [](const std::string& what, int64_t bytes) {
    std::printf("  %-66s %12lld B %10s\n", what.c_str(), static_cast<long long>(bytes),
                mg::format_bytes(bytes).c_str());
  };
  line("host, in the cpu ledger (Input, data.loader)", b.host);
  line("pinned: page-locked host memory, outside every ledger", b.pinned);
  if (o.device_.is_cuda())
    line("staging on " + o.device_.str() + " for the side stream's copies (Input, data.loader)", b.staging);
}

}  // namespace

void add_data_flags(CLI::App& app, DataFlags& d) {
  app.add_option("--data", d.data,
                 "train the GPT on this: a text file, a folder of them (bytes), or llm.c token shards (.bin, a file, "
                 "a folder or a quoted glob such as 'fineweb_train_*.bin'); default: the embedded sonnets")
      ->check(non_empty("a file, a folder or a pattern"));
  app.add_option("--val-data", d.val_data, "held-out data, of the same kind (default: the last tenth of the data)")
      ->check(non_empty("a file, a folder or a pattern"));
  app.add_flag("--show-batch", d.show_batch, "print the first batch: its examples' positions, inputs and targets");
}

TrainData::TrainData(const TrainFlags& f) : seed_(f.seed), flags_(f.data), batch_(f.step.batch), seq_(f.step.seq) {
  const DataFlags& d = f.data;
  if (f.model.model == "mlp") {
    if (!d.data.empty() || !d.val_data.empty())
      throw UsageError("--data and --val-data feed the GPT; --model mlp learns a synthetic teacher's rows");
    return;
  }
  train_ =
      d.data.empty() ? mg::data::Tokens::from_text(kCorpus, "the embedded sonnets") : open_tokens("--data", d.data);
  const int64_t n = train_->size(), window = seq_ + 1;
  const std::string where = d.data.empty() ? "the " + std::to_string(n) + "-byte corpus"
                                           : "--data " + d.data + " (" + std::to_string(n) + " tokens)";
  if (d.val_data.empty()) {  // the last tenth held out, or one window where that is longer
    held_out_ = train_;
    split_ = std::min(n * 9 / 10, n - window);
    if (split_ < window)
      throw UsageError("--seq " + std::to_string(seq_) + " is too long for " + where +
                       " (its training and held-out parts must each hold a window of " + std::to_string(window) +
                       " tokens)");
  } else {
    held_out_ = open_tokens("--val-data", d.val_data);
    split_ = n;
    if (held_out_->vocab() != train_->vocab())
      throw UsageError("--val-data " + held_out_->str() + " is not of the kind of --data " + train_->str());
    if (n < window)
      throw UsageError("--seq " + std::to_string(seq_) + " is too long for " + where + ": a window needs " +
                       std::to_string(window) + " tokens");
    if (held_out_->size() < window)
      throw UsageError("--seq " + std::to_string(seq_) + " is too long for --val-data " + d.val_data + " (" +
                       std::to_string(held_out_->size()) + " tokens): a window needs " + std::to_string(window));
  }
  const int64_t windows = split_ - seq_;  // one starts at every token that has a window and a token after it
  if (windows < batch_)
    throw UsageError("--batch " + std::to_string(batch_) + ": the training part of " + where + " holds " +
                     plural(windows, "window") + " of " + std::to_string(seq_) + " tokens, fewer than one batch");
}

TrainData::~TrainData() = default;

ModelFlags TrainData::model_flags(const ModelFlags& m) const {
  if (!is_gpt() || model_spec(m, seq_).gpt.vocab_size >= train_->vocab()) return m;
  if (m.vocab)
    throw UsageError("--vocab " + std::to_string(m.vocab) + ": the GPT needs a vocabulary of at least " +
                     std::to_string(train_->vocab()) + " to read " + train_->name() + " (" + train_->kind() + ")");
  ModelFlags out = m;
  out.vocab = train_->vocab();
  return out;
}

void TrainData::start(const mg::train::ModelSpec& spec, const StepFlags& s, const mg::Device& device, int rank,
                      int ranks) {
  device_ = device;
  const mg::data::DataLoaderOptions o = loader_options(s, device).shard(rank, ranks, s.accum);
  std::shared_ptr<const mg::data::Sampler> order;
  if (is_gpt()) {
    windows_ = std::make_shared<mg::data::TokenWindows>(train_, seq_, 1, 0, split_);
    dataset_ = windows_;
    order = std::make_shared<mg::data::ShuffledSampler>(windows_->size(), seed_ ^ 0xda7aULL);
  } else {
    dataset_ = std::make_shared<Teacher>(spec.mlp_width, seed_);
  }
  loader_ = std::make_unique<mg::data::DataLoader>(dataset_, order, o);
}

std::pair<mg::Tensor, mg::Tensor> TrainData::next() {
  mg::data::Batch b = loader_->next_batch();
  if (flags_.show_batch && !shown_) {
    shown_ = true;
    std::printf("first batch: %s, epoch %lld\n", plural(int64_t(b.indices.size()), "example").c_str(),
                static_cast<long long>(b.position.epoch));
    const std::vector<double> x = b.data.to(mg::kCPU).to_vector<double>(),
                              y = b.target.to(mg::kCPU).to_vector<double>();
    const size_t width = x.size() / b.indices.size();
    for (size_t r = 0; r < b.indices.size(); ++r) {
      if (windows_)
        std::printf("  example %lld: tokens [%lld, %lld) of %s\n", static_cast<long long>(b.indices[r]),
                    static_cast<long long>(windows_->start(b.indices[r])),
                    static_cast<long long>(windows_->start(b.indices[r]) + seq_), train_->name().c_str());
      else
        std::printf("  example %lld\n", static_cast<long long>(b.indices[r]));
      for (const auto* row : {&x, &y}) {
        std::printf("    %s", row == &x ? "input: " : "target:");
        for (size_t i = r * width; i < (r + 1) * width; ++i) std::printf(" %.10g", (*row)[i]);
        std::printf("\n");
      }
    }
  }
  return {b.data, b.target};
}

std::string TrainData::str() const {
  if (!is_gpt()) return "the MLP's synthetic teacher";
  return train_->str() + (held_out_ == train_
                              ? "; held out: its last " + std::to_string(train_->size() - split_) + " tokens"
                              : "; held out: " + held_out_->str());
}

std::map<std::string, std::string> TrainData::state() const {
  const mg::data::Position p = loader_->position();
  return {{"memgrad.data", str()},
          {"memgrad.data.epoch", std::to_string(p.epoch)},
          {"memgrad.data.example", std::to_string(p.example)}};
}

void TrainData::resume(const std::map<std::string, std::string>& meta, const std::string& path) {
  const std::string flag = "--resume " + path;
  auto get = [&](const char* key) {
    auto it = meta.find(key);
    if (it == meta.end())
      throw UsageError(flag + ": no '" + key + "' in its metadata: where its data stopped is unknown");
    return it->second;
  };
  if (get("memgrad.data") != str())
    throw UsageError(flag + " was saved by a run on other data:\n  saved: " + get("memgrad.data") +
                     "\n  now:   " + str());
  const auto epoch = parse_integer<int64_t>(get("memgrad.data.epoch"));
  const auto example = parse_integer<int64_t>(get("memgrad.data.example"));
  try {
    if (!epoch || !example) throw mg::ValueError("expected integers");
    loader_->set_position({*epoch, *example});
  } catch (const mg::ValueError& e) {
    throw UsageError(flag + ": its data position (memgrad.data.epoch '" + get("memgrad.data.epoch") +
                     "', memgrad.data.example '" + get("memgrad.data.example") + "'): " + e.what());
  }
}

void TrainData::print_held_out_loss(const mg::train::ChainModel& chain, mg::distributed::DataParallel* dp) const {
  if (!is_gpt()) return;
  mg::NoGradGuard no_grad;
  chain.module().eval();
  const bool split = held_out_ == train_;
  auto windows = std::make_shared<mg::data::TokenWindows>(held_out_, seq_, seq_, split ? split_ : 0);
  mg::data::DataLoader loader(windows, nullptr, mg::data::DataLoaderOptions(batch_).device(device_));
  double sum = 0;
  int64_t rows = 0;
  for (int64_t i = 0; i < kEvalBatches; ++i) {
    const std::optional<mg::data::Batch> b = loader.next();
    if (!b) break;
    if (dp) dp->prepare_forward();  // ZeRO-3, --offload params: the units gathered one at a time
    sum += chain.loss(b->data, b->target, mg::train::Policy::none(), dp).item<double>() * double(b->data.size(0));
    rows += b->data.size(0);
  }
  if (dp) dp->zero_grad();  // releases the root unit, held since the last forward
  chain.module().train();
  const int64_t held = held_out_->size() - (split ? split_ : 0);
  const std::string what = !split ? "--val-data " + flags_.val_data
                           : flags_.data.empty()
                               ? "the corpus's last " + std::to_string(held) + " bytes"
                               : "the last " + std::to_string(held) + " tokens of --data " + flags_.data;
  std::printf("held-out loss %.4f over %s of %lld tokens (%s)\n", sum / double(rows), plural(rows, "window").c_str(),
              static_cast<long long>(seq_), what.c_str());
}

void TrainData::print_wait(int64_t steps, double train_seconds) const {
  const double wait = loader_->wait_seconds();
  const int64_t workers = loader_->options().num_workers_;
  std::printf("data: the training thread %s %.2f ms per step (%.1f%% of the steps' time)%s\n",
              workers ? "waited for batches" : "read batches", 1e3 * wait / double(std::max<int64_t>(steps, 1)),
              train_seconds > 0 ? 100.0 * wait / train_seconds : 0.0,
              workers ? (", read ahead by " + plural(workers, "worker")).c_str() : "");
}

void TrainData::print_memory() const {
  print_loader_memory(loader_->options(), loader_->bytes(), ", held for the run:");
}

void print_loader_plan(const mg::train::ModelSpec& spec, const StepFlags& s, mg::DeviceType target) {
  const mg::data::DataLoaderOptions o = loader_options(s, mg::Device(target));
  const auto [data, targets] = example_fields(spec, s);
  const char* note = target == mg::DeviceType::CPU        ? ", counted in the plan below"
                     : mg::data::buffer_counts(o).staging ? " (the device ones counted in the plan below)"
                                                          : " (host memory: not in the device's plan)";
  print_loader_memory(o, mg::data::buffer_bytes(data, targets, o), note);
}

}  // namespace memgrad_cli
