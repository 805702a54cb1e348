#include "train.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>

#include "paths.h"
#include "plan_file.h"
#include "report.h"
#include "sharding.h"
#include "sizes.h"
#include "train_run.h"
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
// Steps in a row whose loss is not finite, each skipped by fp16's loss scaler, that stop a run.
constexpr int64_t kSkippedNonFinite = 8;

// The optimizer of --optimizer with the command's --lr (and --momentum) over `params`.
std::unique_ptr<mg::optim::Optimizer> make_optimizer(const TrainFlags& f, const mg::nn::NamedTensors& params) {
  mg::optim::OptimizerSpec spec(f.step.optimizer, f.step.momentum);  // (only an optimizer with momentum reads it)
  spec.lr = f.lr;
  return mg::optim::make_optimizer(spec, params);
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

// What the planner says about a run that ran out of memory under --memory-limit: the limit its step
// needs, and what fits under this one (the largest batch; --checkpoint auto's choice). Under a
// budget: the floor of its mode, planned on meta for the whole step, and of the other modes.
std::string oom_advice(const TrainFlags& f, const mg::train::ModelSpec& spec, const mg::train::Policy& policy,
                       const mg::Device& device) {
  mg::plan::PlanOptions o;
  o.device = device.type;
  const int64_t limit = mg::memory_stats(device).limit;
  const mg::train::InputShape shape = input_shape(f.step);
  const mg::plan::Program program = train_program(spec, f.step);
  if (mg::budget::enabled(device)) {
    const mg::budget::Options b = mg::budget::options(device);
    mg::plan::PlanOptions floors = o;
    floors.steps = 2, floors.smallest_limit = false, floors.budget = b;
    const mg::plan::StepReport r = mg::plan::plan(program, mg::plan::context(shape, policy), floors);
    const mg::budget::Floor& mine = r.floors[b.remat == mg::budget::Remat::Dynamic][int(b.offload)];
    std::string advice = "\nthe planner (meta, two steps): in this mode the step needs at least " + mine.str() + "\n";
    const char* names[] = {"--remat dynamic", "--offload activations", "--remat dynamic --offload all"};
    const int modes[][2] = {{1, 0}, {0, 1}, {1, 3}};
    for (int i = 0; i < 3; ++i)
      advice += "  with " + std::string(names[i]) + ": " + mg::format_bytes(r.floors[modes[i][0]][modes[i][1]].bytes) +
                " (" + std::to_string(r.floors[modes[i][0]][modes[i][1]].bytes) + " B)\n";
    return advice;
  }
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
                 "under --memory-limit, move activations or optimizer state (stepped there) to host memory; params: "
                 "keep the parameters, their gradients and optimizer state in host memory, each block copied to the "
                 "device for its forward and backward (ZeRO-3's schedule, any number of processes)")
      ->check(CLI::IsMember({"none", "activations", "optimizer", "all", "params"}))
      ->capture_default_str();
  app.add_option("--budget-cost", f.budget_cost,
                 "how --remat/--offload price a tensor: modeled kernel times, so that every run of the same command "
                 "evicts, recomputes and offloads the same tensors (and memgrad plan predicts them on meta), or "
                 "measured ones (DTR's: the machine's load decides)")
      ->check(CLI::IsMember({"modeled", "measured"}))
      ->capture_default_str();
  app.add_option("--plan", f.plan,
                 "mixed: train under --budget with the fastest plan that keeps, recomputes or offloads each saved "
                 "tensor, chosen as memgrad plan --budget B --plan mixed chooses it (--cost-model); or a file that "
                 "memgrad plan --plan mixed --save-plan wrote: the same plan without choosing again")
      ->check(non_empty("mixed or a file name"));
  app.add_option("--cost-model", f.cost_model,
                 "--plan mixed: fit (the kernels' rates fitted to a few steps on this cpu of the model cut to 2 "
                 "blocks) or fixed (100 GFLOP/s, 10 GB/s)")
      ->check(CLI::IsMember({"fit", "fixed"}))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed of parameters, data and dropout")
      ->transform(any_uint64())
      ->capture_default_str();
  app.add_option("--save", f.save, "write the training state (safetensors) here at the end")
      ->check(non_empty("a file name"));
  app.add_option("--resume", f.resume, "continue from a state written by --save (same model and step flags)")
      ->check(input_file());
  app.add_option("--timeline", f.timeline, "HTML memory timeline of the first steps ('' for none)")
      ->capture_default_str();
  app.add_option("--snapshot", f.snapshot, "the same steps' memory snapshot (JSON) for `memgrad view`")
      ->check(non_empty("a file name"));
  app.add_option("--timeline-steps", f.timeline_steps, "steps the timeline covers")
      ->transform(integer_in(1, kMaxCount))
      ->capture_default_str();
  app.add_option("--log", f.log, "CSV of step, loss, tokens/s and allocated bytes")->check(non_empty("a file name"));
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

// Owners counted from the same baseline as the categories are.
std::map<std::string, int64_t> TrainRun::owners_since_base(std::map<std::string, int64_t> owners) const {
  for (auto& [owner, bytes] : base_owners)
    if ((owners[owner] -= bytes) == 0) owners.erase(owner);
  return owners;
}

void TrainRun::set_up() {
  // Data parallelism: the processes mpirun started (or this one alone, with --zero); rank 0 prints.
  offload_params = f.offload == "params";
  const bool data_parallel = dist::launched_world_size() > 1 || f.step.zero > 0 || offload_params;
  world = data_parallel ? &dist::world() : nullptr;
  rank = world ? world->rank() : 0;
  ranks = world ? world->size() : 1;
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout))
    throw mg::IOError("rank " + std::to_string(rank) + ": cannot silence its output");
  step_flags = f.step;
  step_flags.world_size = ranks, step_flags.rank = rank, step_flags.offload_params = offload_params;
  step_options(step_flags);  // a combination that does not train is refused first, before any file is read

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
  if (offload_params && (f.remat != "none" || f.step.zero == 1 || f.step.zero == 2))
    throw UsageError(
        "--offload params runs ZeRO-3's schedule with host memory as the parameters' home: use it with "
        "--zero 0 or 3 and without --remat");
  if (f.step.zero == 3 && (f.remat != "none" || f.offload != "none") && !offload_params)
    throw UsageError(
        "--zero 3 gathers and releases each block's parameters itself: it runs under a plain "
        "--memory-limit, not under the budget of --remat or --offload activations|optimizer|all");
  if (!f.plan.empty() &&
      (data_parallel || f.remat != "none" || f.offload != "none" || f.memory_limit || f.step.checkpoint != "none"))
    throw UsageError(
        "--plan carries out one process's plan under its own budget: expected no --zero, mpirun, --remat, --offload, "
        "--memory-limit or --checkpoint with it (the plan chooses the segments)");
  if (f.plan == "mixed" && !f.step.budget) throw UsageError("--plan mixed needs --budget (e.g. --budget 18MiB)");
  budgeted = f.remat != "none" || (f.offload != "none" && !offload_params);
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
  check_sizes(spec, step_flags);  // sizes.h: tokens per step (all ranks), tensors and totals the flags make
  shape = input_shape(f.step);
  mg::plan::PlanOptions target;
  target.device = device.type;
  if (!f.plan.empty()) {  // the plan's segments, and the device under its budget runtime
    timed = f.plan == "mixed" ? choose_mixed_plan(spec, step_flags, int64_t(f.step.budget), f.cost_model, target)
                              : load_plan(f.plan, plan_signature(spec, step_flags));
    policy = timed->policy;
    apply_plan(device, *timed);
    budgeted = true;
  } else {
    policy = memgrad_cli::policy(step_flags, spec, rank == 0, target);
  }
  tokens = mg::checked_mul(f.step.batch, spec.kind == mg::train::ModelSpec::Kind::GPT ? f.step.seq : 1);
  if (tokens) tokens = mg::checked_mul(*tokens, f.step.accum);
  if (!tokens)
    throw UsageError("--batch " + std::to_string(f.step.batch) + " x --seq " + std::to_string(f.step.seq) +
                     " x --accum " + std::to_string(f.step.accum) + ": more than 2^63 - 1 tokens per step");
  signature = run_signature(f, spec, f.step.accum * ranks);
  if (!f.resume.empty()) saved = read_state(f.resume, signature);
  if (saved && saved->step >= f.steps)
    throw UsageError("--steps " + std::to_string(f.steps) + ": the state is already at step " +
                     std::to_string(saved->step));
  if (world)  // a rank with other flags or another state would issue other collectives: stop all of them now
    check_ranks_agree(*world,
                      signature + "; " + std::to_string(ranks) + " processes, --zero " + std::to_string(f.step.zero) +
                          ", --offload " + f.offload + ", --steps " + std::to_string(f.steps) + ", --resume " +
                          (saved ? f.resume + " (step " + std::to_string(saved->step) + ")" : "none") +
                          // what else decides the collectives: the state gathered at the end, the
                          // buckets, the recomputation, the data each rank reads its share of
                          ", --save " + (f.save.empty() ? "none" : "at the end") + ", --bucket-cap " +
                          std::to_string(f.step.bucket_cap) + ", --checkpoint " + f.step.checkpoint +
                          ", --step-in-backward " + (f.step.step_in_backward ? "on" : "off") + ", unit prefetch " +
                          (f.step.unit_prefetch ? "on" : "off") + ", --attention " + f.model.attention + ", --fuse " +
                          f.model.fuse + ", --remat " + f.remat + ", --plan " + (f.plan.empty() ? "none" : f.plan) +
                          ", --sample " + std::to_string(f.sample) + "; data: " + data.str());
  if (saved) saved->tensors.clear();  // checked now, read again to load: held, they would count in every step
  // The plan starts from an empty allocator: so does the run (nothing the checks above made is cached),
  // and its program holds the data's teacher and the loader's buffers as train does (train_program).
  mg::empty_cache(device);
  base = mg::memory_stats(device);
  host_base = mg::host_memory_stats(device);  // --offload params: what it adds
  mg::reset_host_peak(device);
  base_owners = mg::memory_by_owner(device);
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
  options = step_options(step_flags);
  chain.emplace(spec, device, options.data_parallel());  // deferred: each rank materializes what it holds
  mg::nn::Module& model = chain->module();
  options.units = chain->unit_names();  // --zero 3, --offload params: each block a unit
  trainer.emplace(
      model, options, [this](const mg::nn::NamedTensors& params) { return make_optimizer(f, params); }, group);
  if (!trainer->optimizer())
    throw UsageError("rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                     " holds no piece of any parameter (more processes than the model's units share out): use fewer");
  mg::optim::Optimizer& opt = *trainer->optimizer();
  scaler = trainer->scaler();
  dp = trainer->data_parallel();

  if (f.warmup) warmup.emplace(opt, f.warmup);
  auto load_model = [&](const mg::nn::StateDict& m) {
    dp ? dp->load_model_state_dict(model, m) : model.load_state_dict(m);
  };
  auto load_optimizer = [&](const mg::optim::StateDict& o) {
    dp ? dp->load_state_dict(opt, o) : opt.load_state_dict(o);
  };
  std::vector<std::string> names;  // the parameters in DataParallel's order: its masters' ("master.<i>")
  for (auto& [name, t] : model.named_parameters()) names.push_back(name);
  first = saved ? apply_state(read_state(f.resume, signature), f.resume, names, load_model, load_optimizer,
                              dp ? nullptr : trainer->masters(), dp && dp->masters(), scaler) +
                      1
                : 1;
  if (saved) mg::empty_cache(device);                            // the file's tensors are freed: their segments go too
  for (int64_t t = 1; warmup && t < first; ++t) warmup->step();  // the schedule's position at the saved step
  if (saved) data.resume(saved->meta, f.resume);
  if (saved && saved->meta.count("memgrad.saved_by"))
    std::printf("resuming the state saved by %s at step %lld\n", saved->meta.at("memgrad.saved_by").c_str(),
                static_cast<long long>(saved->step));
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
        "  data parallel: %d process%s (%s), ZeRO stage %d%s, %s; each step's %lld "
        "micro-batches split by rank, rank r running [%lld r, %lld r + %lld)\n",
        ranks, ranks > 1 ? "es" : "", group->backend().c_str(), dp->zero_stage(),
        offload_params ? " with the parameters in host memory (--offload params)" : "",
        dp->units() ? units_line(*dp, int64_t(model.parameters()[0].element_size())).c_str()
                    : (std::to_string(dp->buckets().size()) + " gradient buckets of up to " +
                       mg::format_bytes(int64_t(f.step.bucket_cap)))
                          .c_str(),
        static_cast<long long>(f.step.accum * ranks), static_cast<long long>(f.step.accum),
        static_cast<long long>(f.step.accum), static_cast<long long>(f.step.accum));
}

void TrainRun::run_steps() {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log(nullptr, std::fclose);  // --log: written as the steps run
  timeline = (!f.timeline.empty() || !f.snapshot.empty()) && rank == 0;       // files: rank 0 writes them
  if (!f.log.empty() && rank == 0) {
    log.reset(mg::open_output_stream(f.log, "--log"));  // core/files.h: a link followed, a FIFO refused
    std::fprintf(log.get(), "step,loss,tokens_per_s,allocated%s\n",
                 f.plan.empty() ? "" : ",step_ms,predicted_ms,peak,planned_peak");
  }
  if (timeline) mg::record_history(true, 1000000);
  tokens_per_step = *tokens * ranks;
  communication_before = dp ? dp->communication_seconds() : 0;
  Progress progress(first, f.steps, f.log_every ? f.log_every : std::max<int64_t>(1, (f.steps - first + 1) / 20),
                    f.quiet, data.is_gpt() ? "tok" : "rows");
  std::optional<mg::KernelProfile> profile;  // --profile: the steps after the first (all of a 1-step run)
  double profiled_seconds = 0;
  int64_t unfinished = 0;  // steps in a row whose loss was not finite (each one skipped by fp16's scaler)
  try {
    for (int64_t step = first; step <= f.steps; ++step) {
      if (f.profile && !profile && (step > first || first == f.steps)) profile.emplace();
      const auto t0 = Clock::now();
      if (timeline) mg::annotate_memory("step " + std::to_string(step), device);
      mg::reset_peak(device);  // as the planner does: the step (gradients cleared first) is measured whole
      if (timed) mg::budget::begin_step(device);  // a per-tensor plan's storages are counted per step
      const int64_t skipped = scaler ? scaler->skipped_steps() : 0;
      loss = mg::train::train_step(
          *chain, *trainer, [&](int64_t) { return data.next(); }, policy);
      // A non-finite loss stops the run, unless fp16's scaler skipped the step (the parameters unchanged)
      // and has not skipped every step since: a skipped step does not fix a loss computed before it.
      unfinished = std::isfinite(loss) ? 0 : unfinished + 1;
      if (unfinished && (!scaler || scaler->skipped_steps() == skipped || unfinished == kSkippedNonFinite))
        throw mg::ValueError("step " + std::to_string(step) + ": the loss is " + (std::isnan(loss) ? "nan" : "inf") +
                             (unfinished > 1 ? " (" + std::to_string(unfinished) + " steps in a row)" : "") +
                             ": training diverged (try a lower --lr, --clip, --warmup or --precision bf16)");
      if (warmup) warmup->step();
      if (device.is_cuda()) mg::cuda::synchronize(device.index);
      const double dt = seconds_since(t0);
      train_seconds += dt;
      if (profile) profiled_seconds += dt;
      const mg::MemoryStats m = mg::memory_stats(device);
      const int64_t peak = m.peak_allocated - base.allocated;
      if (timed) step_seconds.push_back(dt), step_peaks.push_back(peak);
      reserved = std::max(reserved, m.peak_reserved - base.reserved);
      if (step == first) peaks[0] = peak;
      for (int c = 0; c < mg::kNumCategories; ++c)
        after_step[size_t(c)] = m.by_category[size_t(c)] - base.by_category[size_t(c)];
      host_after_step = mg::host_memory_stats(device);
      for (int c = 0; c < mg::kNumCategories; ++c)
        host_after_step.by_category[size_t(c)] -= host_base.by_category[size_t(c)];
      if (step > first && peak >= peaks[1]) {
        peaks[1] = peak;
        at_peak = m.at_peak_by_category;
        for (int c = 0; c < mg::kNumCategories; ++c) at_peak[size_t(c)] -= base.by_category[size_t(c)];
        owners_at_peak = owners_since_base(m.at_peak_by_owner);
      }
      progress.update(step, loss, double(tokens_per_step) / dt, m);
      if (log) {
        char line[128];
        std::snprintf(line, sizeof line, "%lld,%.9g,%.1f,%lld", static_cast<long long>(step), loss,
                      double(tokens_per_step) / dt, static_cast<long long>(m.allocated));
        std::fputs(line, log.get());
        if (timed) {  // each step's time and peak beside the plan's (its first step, or the steady one)
          std::snprintf(line, sizeof line, ",%.3f,%.3f,%lld,%lld", dt * 1e3, timed->predicted * 1e3,
                        static_cast<long long>(peak),
                        static_cast<long long>(step == 1 ? timed->planned.first_peak : timed->planned.peak));
          std::fputs(line, log.get());
        }
        std::fputs("\n", log.get());
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
  if (log) {  // a write that failed (a full disk) fails the run: not a short CSV and exit 0
    bool failed = std::fflush(log.get()) != 0 || std::ferror(log.get()) != 0;
    int error = errno;
    if (std::fclose(log.release()) != 0 && !failed) failed = true, error = errno;
    if (failed) throw mg::IOError("--log '" + f.log + "': writing failed: " + std::strerror(error));
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

int run_train(const TrainFlags& f) {
  // Files written later (the state at the end, the timeline after a few steps) are checked first,
  // against each other and the files the run reads (paths.h).
  check_run_files(f);
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
