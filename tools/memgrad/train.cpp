#include "train.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include "report.h"
#include "train_state.h"
#include "view.h"

namespace memgrad_cli {

namespace {

using Clock = std::chrono::steady_clock;
#ifdef MG_WITH_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::unique_ptr<mg::optim::Optimizer> make_optimizer(const TrainFlags& f, const mg::nn::NamedTensors& params) {
  using namespace mg::optim;
  if (f.step.optimizer == "sgd") return std::make_unique<SGD>(params, SGDOptions(f.lr).momentum(f.step.momentum));
  if (f.step.optimizer == "adam") return std::make_unique<Adam>(params, AdamOptions(f.lr));
  if (f.step.optimizer == "adam8bit") return std::make_unique<Adam8bit>(params, Adam8bitOptions(f.lr));
  if (f.step.optimizer == "adamw8bit") return std::make_unique<AdamW8bit>(params, AdamW8bitOptions(f.lr));
  if (f.step.optimizer == "adafactor") return std::make_unique<Adafactor>(params, AdafactorOptions(f.lr));
  return std::make_unique<AdamW>(params, AdamWOptions(f.lr));
}

// A line that redraws itself on a terminal, or a plain line every `every` steps otherwise.
class Progress {
 public:
  Progress(int64_t first, int64_t last, int64_t every, bool quiet, const char* unit)
      : first_(first), last_(last), every_(every), quiet_(quiet), tty_(isatty(fileno(stdout))), unit_(unit) {}
  void update(int64_t step, double loss, double tokens_per_s, const mg::MemoryStats& m) {
    if (quiet_ || (!tty_ && step % every_ != 0 && step != last_ && step != first_)) return;
    const int width = 24, done = int(double(width) * double(step) / double(last_));
    std::string bar = "[" + std::string(size_t(done), '#') + std::string(size_t(width - done), '.') + "]";
    std::printf("%sstep %5lld/%lld %s loss %.4f | %9.0f %s/s | mem %10s (peak %10s)%s", tty_ ? "\r" : "",
                static_cast<long long>(step), static_cast<long long>(last_), bar.c_str(), loss, tokens_per_s, unit_,
                mg::format_bytes(m.allocated).c_str(), mg::format_bytes(m.peak_allocated).c_str(), tty_ ? "" : "\n");
    if (tty_ && step == last_) std::printf("\n");
    std::fflush(stdout);
  }

 private:
  int64_t first_, last_, every_;
  bool quiet_, tty_;
  const char* unit_;
};

// Samples `n` bytes from the GPT after a newline, at temperature 0.8, without recording history.
std::string sample_text(mg::nn::GPT& gpt, const mg::Device& device, int64_t n, uint64_t seed) {
  mg::NoGradGuard no_grad;
  gpt.eval();
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ctx = {int64_t('\n')};
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t T = std::min<int64_t>(int64_t(ctx.size()), gpt.config.block_size);
    std::vector<int64_t> window(ctx.end() - T, ctx.end());
    mg::Tensor logits = gpt.forward(mg::tensor(window, {1, T}).to(device))
                            .select(1, T - 1)
                            .reshape({-1})
                            .slice(0, 0, 256);  // bytes only
    std::vector<float> p = mg::softmax(logits * (1.0 / 0.8), 0).to(mg::kCPU).to_vector<float>();
    std::discrete_distribution<int64_t> pick(p.begin(), p.end());
    const int64_t next = pick(rng);
    ctx.push_back(next);
    out.push_back(char(next));
  }
  gpt.train();
  return out;
}

// What the planner says about a run that ran out of memory under --memory-limit: the limit its step
// needs, and what fits under this one (the largest batch; --checkpoint auto's choice).
std::string oom_advice(const TrainFlags& f, const mg::plan::ModelSpec& spec, const mg::plan::Policy& policy,
                       const mg::Device& device) {
  mg::plan::PlanOptions o;
  o.device = device.type;
  const int64_t limit = mg::memory_stats(device).limit;
  const mg::plan::InputShape shape = input_shape(f.step);
  const mg::plan::Program program = train_program(spec, f.step);
  const mg::plan::StepReport r = mg::plan::plan(program, mg::plan::context(shape, policy), o);
  std::string advice = "\nthe planner: this step needs a --memory-limit of at least " +
                       mg::format_bytes(r.smallest_limit) + " (" + std::to_string(r.smallest_limit) +
                       " B, its reserved peak)";
  if (limit <= 0) return advice + ".\n";
  advice += "; the limit is " + mg::format_bytes(limit) + " (" + std::to_string(limit) + " B).\n";
  const int64_t b = mg::plan::largest_batch(program, mg::plan::context(shape, policy), limit, o);
  advice += "  the largest --batch whose steps run under it: " + std::to_string(b) + "\n";
  const auto best = mg::plan::best_fit(mg::plan::choose_segments(program, mg::plan::context(shape), limit, o));
  advice += best ? "  --checkpoint auto --budget " + std::to_string(limit) + " would run " + best->method + " (" +
                       best->policy.str() + ")\n"
                 : "  no checkpoint segments make batch " + std::to_string(f.step.batch) + " run under it\n";
  return advice;
}

}  // namespace

void add_train_flags(CLI::App& app, TrainFlags& f) {
  add_model_flags(app, f.model);
  add_step_flags(app, f.step);
  add_data_parallel_flags(app, f.step);
  add_data_flags(app, f.data);
  app.add_option("--device", f.device, "auto (cuda when a GPU is present), cpu or cuda[:N]")->capture_default_str();
  app.add_option("-n,--steps", f.steps, "optimizer steps in total (a resumed run continues to this step)")
      ->transform(integer_in(1, kMaxCount))
      ->capture_default_str();
  app.add_option("--lr", f.lr, "learning rate")->transform(number_in(0.0, INFINITY, true))->capture_default_str();
  app.add_option("--warmup", f.warmup, "steps of linear learning-rate warmup (0: none), then constant")
      ->transform(integer_in(0, kMaxCount))
      ->capture_default_str();
  byte_size(app.add_option("--memory-limit", f.memory_limit,
                           "act like a device of this size, e.g. 64MiB (out of memory: exit 3)"));
  app.add_option("--remat", f.remat,
                 "dynamic: stay under --memory-limit by evicting tensors and recomputing them when touched (DTR)")
      ->check(CLI::IsMember({"none", "dynamic"}))
      ->capture_default_str();
  app.add_option("--offload", f.offload,
                 "under --memory-limit, move activations or optimizer state (stepped there) to host memory")
      ->check(CLI::IsMember({"none", "activations", "optimizer", "all"}))
      ->capture_default_str();
  app.add_option("--budget-cost", f.budget_cost,
                 "how --remat/--offload price a tensor: measured kernel times (DTR), or modeled ones, so that "
                 "every run of the same command evicts and recomputes the same tensors")
      ->check(CLI::IsMember({"measured", "modeled"}))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed of parameters, data and dropout")
      ->transform(any_uint64())
      ->capture_default_str();
  app.add_option("--save", f.save, "write the training state (safetensors) here at the end");
  app.add_option("--resume", f.resume, "continue from a state written by --save (same model and step flags)")
      ->check(CLI::ExistingFile);
  app.add_option("--timeline", f.timeline, "HTML memory timeline of the first steps ('' for none)")
      ->capture_default_str();
  app.add_option("--snapshot", f.snapshot, "the same steps' memory snapshot (JSON) for `memgrad view`");
  app.add_option("--timeline-steps", f.timeline_steps, "steps the timeline covers")
      ->transform(integer_in(1, kMaxCount))
      ->capture_default_str();
  app.add_option("--log", f.log, "CSV of step, loss, tokens/s and allocated bytes");
  app.add_option("--log-every", f.log_every, "print a line every N steps when not on a terminal (0: about 20 lines)")
      ->transform(integer_in(0, kMaxCount));
  app.add_option("--sample", f.sample, "GPT: bytes of text to generate at the end (0: none)")
      ->transform(integer_in(0, kMaxCount))
      ->capture_default_str();
  app.add_flag("-q,--quiet", f.quiet, "no progress lines");
  app.add_flag("--profile", f.profile,
               "time each kernel over the steps after the first and print where the time went (on cuda each "
               "kernel is synchronized, which slows the run)");
}

namespace {

namespace dist = mg::distributed;

// One `memgrad train` run, phase by phase (run_train calls them in order). Its members are what the
// phases share, declared in the order they are made, so they are destroyed in reverse, as locals were.
struct TrainRun {
  explicit TrainRun(const TrainFlags& flags) : f(flags), data(flags) {}
  void set_up();                  // processes, device, limits, the plan's policy, a saved state, the data loader
  void build();                   // the model and its trainer, the saved state loaded, the run's header
  void run_steps();               // the steps: progress, log, peaks, timeline, profile
  void report_training();         // time, loss, held-out loss, sample, and the memory at the peak
  void report_plan();             // the same steps planned on meta, against the measured peaks
  void report_ranks_and_state();  // every rank's figures, the optimizer state, the files written

  const TrainFlags& f;
  TrainData data;  // the files opened and checked against the flags, nothing allocated yet
  dist::ProcessGroup* world = nullptr;
  int rank = 0, ranks = 1;
  StepFlags step_flags;  // this rank's
  mg::Device device = mg::kCPU;
  bool budgeted = false;
  mg::plan::ModelSpec spec;
  mg::plan::InputShape shape;
  mg::plan::Policy policy;
  std::optional<int64_t> tokens;  // per step, this rank's (mlp: rows)
  std::string signature;
  std::optional<SavedState> saved;
  mg::MemoryStats base;                                 // before the model was built
  std::optional<mg::cuda::DeviceMemory> driver_before;  // cuda: the driver's view, for the bytes outside the ledger
  std::unique_ptr<dist::ProcessGroup> nccl;
  dist::ProcessGroup* group = nullptr;
  std::optional<mg::plan::ChainModel> chain;
  std::optional<mg::plan::Trainer> trainer;
  mg::amp::GradScaler* scaler = nullptr;
  dist::DataParallel* dp = nullptr;
  std::optional<mg::optim::LinearWarmupLR> warmup;  // made before a resume overwrites the lr with its scheduled value
  int64_t first = 1;                                // the first step this run takes
  bool timeline = false;
  int64_t tokens_per_step = 0;  // mlp: rows; all ranks
  double communication_before = 0;
  double loss = 0, train_seconds = 0;
  int64_t peaks[2] = {0, 0};  // allocated: the first step, and the largest of the later ones
  int64_t reserved = 0;       // the largest reserved of all steps
  mg::CategoryBytes at_peak{};
  std::map<std::string, int64_t> owners_at_peak;
  int64_t steps_run = 0;
  double communication = 0;
  mg::MemoryStats after;                // after the steps
  int64_t planned_peaks[2] = {-1, -1};  // for the ranks' table
};

void TrainRun::set_up() {
  // Data parallelism: the processes mpirun started (or this one alone, with --zero); rank 0 prints.
  const bool data_parallel = dist::launched_world_size() > 1 || f.step.zero > 0;
  world = data_parallel ? &dist::world() : nullptr;
  rank = world ? world->rank() : 0;
  ranks = world ? world->size() : 1;
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout))
    throw mg::IOError("rank " + std::to_string(rank) + ": cannot silence its output");
  step_flags = f.step;
  step_flags.world_size = ranks, step_flags.rank = rank;

  try {
    const int local = ranks > 1 ? dist::local_rank() % std::max(1, mg::cuda_device_count()) : 0;
    device = f.device == "auto"   ? (mg::cuda_available() ? mg::cuda_device(local) : mg::kCPU)
             : f.device == "cuda" ? mg::cuda_device(local)
                                  : mg::Device(f.device);
  } catch (const mg::Error& e) {
    throw UsageError("--device: " + std::string(e.what()));
  }
  if (device.is_meta()) throw UsageError("--device meta: use `memgrad plan` to run on the meta device");
  if (device.is_cuda() && device.index >= mg::cuda_device_count())
    throw UsageError("--device " + f.device + ": " + std::to_string(mg::cuda_device_count()) + " CUDA devices here" +
                     (kBuiltWithCuda ? "" : " (memgrad was built without CUDA)"));
  budgeted = f.remat != "none" || f.offload != "none";
  if (budgeted && !f.memory_limit)
    throw UsageError("--remat and --offload keep training under --memory-limit: give one");
  if (budgeted) {
    mg::budget::Options o;
    o.limit = int64_t(f.memory_limit);
    o.remat = f.remat == "dynamic" ? mg::budget::Remat::Dynamic : mg::budget::Remat::None;
    o.offload = f.offload == "activations" ? mg::budget::Offload::Activations
                : f.offload == "optimizer" ? mg::budget::Offload::Optimizer
                : f.offload == "all"       ? mg::budget::Offload::All
                                           : mg::budget::Offload::None;
    o.cost = f.budget_cost == "modeled" ? mg::budget::Cost::Modeled : mg::budget::Cost::Measured;
    mg::set_caching(device, false);  // the limit then binds on the bytes handed out, not on cached segments
    mg::budget::enable(device, o);
  } else if (f.memory_limit) {
    mg::set_memory_limit(device, int64_t(f.memory_limit));
  }
  spec = model_spec(data.model_flags(f.model), f.step.seq);
  shape = input_shape(f.step);
  mg::plan::PlanOptions target;
  target.device = device.type;
  policy = memgrad_cli::policy(step_flags, spec, rank == 0, target);
  tokens = mg::checked_mul(f.step.batch, spec.kind == mg::plan::ModelSpec::Kind::GPT ? f.step.seq : 1);
  if (tokens) tokens = mg::checked_mul(*tokens, f.step.accum);
  if (!tokens)
    throw UsageError("--batch " + std::to_string(f.step.batch) + " x --seq " + std::to_string(f.step.seq) +
                     " x --accum " + std::to_string(f.step.accum) + ": more than 2^63 - 1 tokens per step");
  signature = run_signature(f, spec, f.step.accum * ranks);
  if (!f.resume.empty()) saved = read_state(f.resume, signature);
  if (saved && saved->step >= f.steps)
    throw UsageError("--steps " + std::to_string(f.steps) + ": the state is already at step " +
                     std::to_string(saved->step));
  // The plan starts from an empty allocator: so does the run (nothing the checks above made is cached),
  // and its program holds the data's teacher and the loader's buffers as train does (train_program).
  mg::empty_cache(device);
  base = mg::memory_stats(device);
  if (device.is_cuda()) driver_before = mg::cuda::device_memory(device.index);
  data.start(spec, step_flags, device, rank, ranks);

  // cuda tensors travel over NCCL (this process alone: a group of one, or NCCL's when built with it)
  group = world;
  if (world && device.is_cuda() && (dist::nccl_built() || ranks > 1)) {
    if (!dist::nccl_built())
      throw UsageError("--device " + device.str() + " with " + std::to_string(ranks) +
                       " processes needs NCCL, and memgrad was built without it");
    nccl = dist::new_nccl_group(*world, device.index);
    group = nccl.get();
  }
}

void TrainRun::build() {
  mg::manual_seed(f.seed);
  chain.emplace(spec, device);
  mg::nn::Module& model = chain->module();
  const mg::plan::StepOptions options = step_options(step_flags);
  trainer.emplace(
      model, options, [this](const mg::nn::NamedTensors& params) { return make_optimizer(f, params); }, group);
  mg::optim::Optimizer& opt = *trainer->optimizer();
  scaler = trainer->scaler();
  dp = trainer->data_parallel();

  if (f.warmup) warmup.emplace(opt, f.warmup);
  auto load_optimizer = [&](const mg::optim::StateDict& o) {
    dp ? dp->load_state_dict(opt, o) : opt.load_state_dict(o);
  };
  first =
      saved ? apply_state(*saved, f.resume, model, load_optimizer, dp ? nullptr : trainer->masters(), scaler) + 1 : 1;
  for (int64_t t = 1; warmup && t < first; ++t) warmup->step();  // the schedule's position at the saved step
  if (saved) data.resume(saved->meta, f.resume);
  std::printf("memgrad train: %s, %s parameters, on %s\n", model_str(spec).c_str(),
              thousands(model.num_parameters()).c_str(), device.str().c_str());
  std::printf("  batch %lld%s, accum %lld, %s lr %g%s, %s, checkpoint %s (%s), seed %llu%s\n",
              static_cast<long long>(f.step.batch),
              data.is_gpt() ? (" x " + std::to_string(f.step.seq)).c_str() : " rows",
              static_cast<long long>(f.step.accum), f.step.optimizer.c_str(), f.lr,
              f.step.step_in_backward ? " (stepped inside backward)" : "", f.step.precision.c_str(),
              policy.name.c_str(), policy.str().c_str(), static_cast<unsigned long long>(f.seed),
              f.resume.empty() ? "" : (", resumed at step " + std::to_string(first - 1)).c_str());
  std::printf("  data: %s\n", data.str().c_str());
  if (dp)
    std::printf(
        "  data parallel: %d process%s (%s), ZeRO stage %d, %zu gradient buckets of up to %s; each step's %lld "
        "micro-batches split by rank, rank r running [%lld r, %lld r + %lld)\n",
        ranks, ranks > 1 ? "es" : "", group->backend().c_str(), f.step.zero, dp->buckets().size(),
        mg::format_bytes(int64_t(f.step.bucket_cap)).c_str(), static_cast<long long>(f.step.accum * ranks),
        static_cast<long long>(f.step.accum), static_cast<long long>(f.step.accum),
        static_cast<long long>(f.step.accum));
}

void TrainRun::run_steps() {
  std::ofstream log;
  timeline = (!f.timeline.empty() || !f.snapshot.empty()) && rank == 0;  // files: rank 0 writes them
  if (!f.log.empty() && rank == 0) {
    log.open(f.log);
    if (!log) throw mg::IOError("--log: cannot write " + f.log);
    log << "step,loss,tokens_per_s,allocated\n";
  }
  if (timeline) mg::record_history(true, 1000000);
  tokens_per_step = *tokens * ranks;
  communication_before = dp ? dp->communication_seconds() : 0;
  Progress progress(first, f.steps, f.log_every ? f.log_every : std::max<int64_t>(1, (f.steps - first + 1) / 20),
                    f.quiet, data.is_gpt() ? "tok" : "rows");
  std::optional<mg::KernelProfile> profile;  // --profile: the steps after the first (all of a 1-step run)
  double profiled_seconds = 0;
  std::pair<mg::Tensor, mg::Tensor> batch;  // the micro-batch drawn last, and its index in the step
  int64_t drawn_micro_batch = -1;
  try {
    for (int64_t step = first; step <= f.steps; ++step) {
      if (f.profile && !profile && (step > first || first == f.steps)) profile.emplace();
      const auto t0 = Clock::now();
      if (timeline) mg::annotate_memory("step " + std::to_string(step), device);
      mg::reset_peak(device);  // as the planner does: the step (gradients cleared first) is measured whole
      // step_in_backward with clipping or loss scaling runs the last micro-batch's forward twice:
      // it must see the same batch, so the last one drawn is kept until the next is
      loss = mg::plan::train_step(
          *chain, *trainer,
          [&](int64_t g) {
            if (g != drawn_micro_batch) batch = data.next(), drawn_micro_batch = g;
            return batch;
          },
          policy);
      batch = {}, drawn_micro_batch = -1;
      if (warmup) warmup->step();
      if (device.is_cuda()) mg::cuda::synchronize(device.index);
      const double dt = seconds_since(t0);
      train_seconds += dt;
      if (profile) profiled_seconds += dt;
      const mg::MemoryStats m = mg::memory_stats(device);
      const int64_t peak = m.peak_allocated - base.allocated;
      reserved = std::max(reserved, m.peak_reserved - base.reserved);
      if (step == first) peaks[0] = peak;
      if (step > first && peak >= peaks[1]) {
        peaks[1] = peak;
        at_peak = m.at_peak_by_category;
        for (int c = 0; c < mg::kNumCategories; ++c) at_peak[size_t(c)] -= base.by_category[size_t(c)];
        owners_at_peak = m.at_peak_by_owner;
      }
      progress.update(step, loss, double(tokens_per_step) / dt, m);
      if (log) {
        char line[128];
        std::snprintf(line, sizeof line, "%lld,%.9g,%.1f,%lld\n", static_cast<long long>(step), loss,
                      double(tokens_per_step) / dt, static_cast<long long>(m.allocated));
        log << line;
      }
      if (timeline && step == std::min(first + f.timeline_steps - 1, f.steps)) {  // once: off clears it
        write_memory_files(f.timeline, f.snapshot, device,
                           "memgrad train: steps " + std::to_string(first) + "-" + std::to_string(step) + ", " +
                               model_str(spec) + ", checkpoint " + policy.name + ", " + f.step.precision);
        mg::record_history(false);
      }
    }
  } catch (const mg::OutOfMemoryError&) {
    if (timeline && mg::recording_history()) {  // the steps up to the failure, with it marked
      write_memory_files(f.timeline, f.snapshot, device,
                         "memgrad train: out of memory, " + model_str(spec) + ", checkpoint " + policy.name);
      std::printf("\nmemory timeline up to the out-of-memory error: %s\n",
                  (f.timeline.empty() ? f.snapshot : f.timeline).c_str());
    }
    std::fflush(stdout);
    std::fprintf(stderr, "%s", oom_advice(f, spec, policy, device).c_str());
    throw;
  }
  if (profile) {
    const int64_t from = first == f.steps ? first : first + 1;
    std::printf("\ntime by kernel, steps %lld-%lld on %s:\n", static_cast<long long>(from),
                static_cast<long long>(f.steps), device.str().c_str());
    print_kernel_times(*profile, profiled_seconds, f.steps - from + 1);
    profile.reset();
  }
  chain->module().zero_grad();  // the last step's gradients: not needed for evaluation
}

void TrainRun::report_training() {
  steps_run = f.steps - first + 1;
  std::printf("\ntrained %lld steps in %s: %.0f %s/s, final loss %.4f", static_cast<long long>(steps_run),
              format_seconds(train_seconds).c_str(), double(tokens_per_step * steps_run) / train_seconds,
              data.is_gpt() ? "tokens" : "rows", loss);
  if (scaler && scaler->skipped_steps())
    std::printf(" (%lld steps skipped by the grad scaler)", static_cast<long long>(scaler->skipped_steps()));
  std::printf("\n");
  communication = dp ? dp->communication_seconds() - communication_before : 0;
  data.print_wait(steps_run, train_seconds);
  if (dp)
    std::printf("communication: rank 0 was blocked waiting for reductions and gathers %s of %s (%.1f%%)\n",
                format_seconds(communication).c_str(), format_seconds(train_seconds).c_str(),
                100.0 * communication / train_seconds);

  if (data.is_gpt() && rank == 0) {  // held-out loss, without recording history: no activations are kept
    data.print_held_out_loss(*chain);
    if (f.sample > 0)
      std::printf("sample:\n%s\n",
                  sample_text(dynamic_cast<mg::nn::GPT&>(chain->module()), device, f.sample, f.seed).c_str());
  }

  if (steps_run == 1) {  // no later step: the breakdown of the first
    const mg::MemoryStats m = mg::memory_stats(device);
    at_peak = m.at_peak_by_category;
    for (int c = 0; c < mg::kNumCategories; ++c) at_peak[size_t(c)] -= base.by_category[size_t(c)];
    owners_at_peak = m.at_peak_by_owner;
  }
  std::printf("\nmemory on %s at the peak of step%s %lld%s%s, counted from before the model was built:\n",
              device.str().c_str(), steps_run > 1 ? "s" : "", static_cast<long long>(std::min(first + 1, f.steps)),
              steps_run > 2 ? "-" : "", steps_run > 2 ? std::to_string(f.steps).c_str() : "");
  print_breakdown(steps_run > 1 ? peaks[1] : peaks[0], at_peak, owners_at_peak, 12);
  after = mg::memory_stats(device);
  std::printf("  reserved by the caching allocator: %s now\n", mg::format_bytes(after.reserved).c_str());
  if (driver_before) print_outside_ledger(*driver_before, mg::cuda::device_memory(device.index));
}

void TrainRun::report_plan() {
  // The planner runs the same steps on meta, for this device and under the same limit.
  mg::plan::PlanOptions plan_options;
  plan_options.device = device.type;
  plan_options.memory_limit = budgeted ? 0 : int64_t(f.memory_limit);  // a budget is the runtime's, not the allocator's
  plan_options.max_steps = std::min<int64_t>(steps_run, 16);
  const mg::plan::StepReport planned =
      mg::plan::plan(train_program(spec, step_flags), mg::plan::context(shape, policy), plan_options);
  auto compare = [&](const char* what, int64_t measured, int64_t plan_bytes) {
    std::string verdict = measured == plan_bytes ? "exact" : "off by " + std::to_string(measured - plan_bytes) + " B";
    if (measured != plan_bytes && scaler && scaler->skipped_steps())
      verdict += ": the grad scaler skipped steps (inf/NaN gradients), the plan assumes every step is taken";
    std::printf("  %s: measured %s (%lld B), planned on meta %s (%lld B): %s\n", what,
                mg::format_bytes(measured).c_str(), static_cast<long long>(measured),
                mg::format_bytes(plan_bytes).c_str(), static_cast<long long>(plan_bytes), verdict.c_str());
  };
  if (!f.resume.empty()) {  // a resumed run's first step already holds optimizer state: only later steps compare
    if (steps_run > 1) compare("later steps' allocated peak", peaks[1], planned_peaks[1] = planned.peak);
    std::printf("  (a resumed run's allocator history differs from the plan's, which starts from the first step)\n");
  } else {
    compare("first step's allocated peak", peaks[0], planned_peaks[0] = planned.first_peak);
    if (steps_run > 1) compare("later steps' allocated peak", peaks[1], planned_peaks[1] = planned.peak);
    if (!budgeted)  // the budget runs with caching off: its reserved bytes are not the plan's
      compare(f.memory_limit ? "reserved peak under this --memory-limit" : "reserved peak with no limit", reserved,
              planned.reserved);
  }
  if (planned.smallest_limit)
    std::printf("  the smallest --memory-limit these steps run under: %s (%lld B)\n",
                mg::format_bytes(planned.smallest_limit).c_str(), static_cast<long long>(planned.smallest_limit));
  if (budgeted) {
    std::printf("  memory budget %s (--remat %s, --offload %s): the plan above is the unconstrained step\n",
                mg::format_bytes(int64_t(f.memory_limit)).c_str(), f.remat.c_str(), f.offload.c_str());
    std::printf("  %s\n", mg::budget::stats_report(device).c_str());
  }
  data.print_memory();
}

void TrainRun::report_ranks_and_state() {
  mg::optim::Optimizer& opt = *trainer->optimizer();
  if (dp) {  // every rank's figures, gathered (the calls below are collective: every rank makes them)
    auto held = [this](mg::Category c) { return after.category(c) - base.category(c); };
    const std::vector<int64_t> mine = {peaks[0],
                                       peaks[1],
                                       planned_peaks[0],
                                       planned_peaks[1],
                                       held(mg::Category::Parameter),
                                       held(mg::Category::Gradient),
                                       held(mg::Category::OptimizerState),
                                       int64_t(communication * 1e6),
                                       int64_t(train_seconds * 1e6)};
    const std::vector<int64_t> all = world->all_gather(mine);
    std::printf(
        "\nevery rank (%d processes, ZeRO stage %d): each step's peak measured and planned on meta for that "
        "rank; the bytes it holds after the last step; its time blocked on communication\n",
        ranks, f.step.zero);
    for (int r = 0; r < ranks; ++r) {
      const int64_t* v = &all[size_t(r) * mine.size()];
      std::string line = "  rank " + std::to_string(r) + ":";
      for (int i = 0; i < 2; ++i)
        if (v[2 + i] >= 0)
          line += std::string(i ? " later steps " : " first step ") + std::to_string(v[i]) + " B, planned " +
                  std::to_string(v[2 + i]) + " B: " + (v[i] == v[2 + i] ? "exact;" : "differs;");
      char tail[256];
      std::snprintf(tail, sizeof tail,
                    " Parameter %lld B, Gradient %lld B, OptimizerState %lld B; communication %.1f%%",
                    static_cast<long long>(v[4]), static_cast<long long>(v[5]), static_cast<long long>(v[6]),
                    v[8] ? 100.0 * double(v[7]) / double(v[8]) : 0.0);
      std::printf("%s%s\n", line.c_str(), tail);
    }
    const std::string table = dp->shard_table(opt);
    std::printf(
        "\noptimizer state per parameter (%s): which rank holds which elements, and the bytes of state its "
        "ledger holds for them\n%s",
        opt.type().c_str(), table.c_str());
  } else {
    std::printf("\noptimizer state per parameter (%s):\n%s", opt.type().c_str(), opt.state_report().str().c_str());
  }
  if (timeline && !f.timeline.empty()) std::printf("memory timeline: %s\n", f.timeline.c_str());
  if (timeline && !f.snapshot.empty()) std::printf("memory snapshot: %s (memgrad view draws it)\n", f.snapshot.c_str());
  if (!f.save.empty()) {
    const mg::optim::StateDict optimizer = dp ? dp->state_dict(opt) : opt.state_dict();  // collective with dp
    if (rank == 0)
      save_state(f.save, f.steps, signature, chain->module(), optimizer, dp ? nullptr : trainer->masters(), scaler,
                 data.state());
    if (world) world->barrier();  // the file exists when any rank returns
    std::printf("training state (step %lld): %s\n", static_cast<long long>(f.steps), f.save.c_str());
  }
}

}  // namespace

int run_train(const TrainFlags& f) {
  // Files written later (the state at the end, the timeline after a few steps) are checked first.
  if (!f.save.empty()) check_writable("--save", f.save);
  if (!f.save.empty() && f.step.zero > 0 && f.step.optimizer.find("8bit") != std::string::npos)
    throw UsageError("--save with --zero " + std::to_string(f.step.zero) + " and --optimizer " + f.step.optimizer +
                     ": ZeRO gathers only optimizer state shaped like its parameter, not 8-bit blocks; use --zero 0");
  if (!f.log.empty()) check_writable("--log", f.log);
  if (!f.timeline.empty()) check_writable("--timeline", f.timeline);
  if (!f.snapshot.empty()) check_writable("--snapshot", f.snapshot);
  TrainRun run(f);
  run.set_up();
  run.build();
  run.run_steps();
  run.report_training();
  run.report_plan();
  run.report_ranks_and_state();
  return 0;
}

}  // namespace memgrad_cli
