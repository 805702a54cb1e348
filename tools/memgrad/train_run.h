// `memgrad train`'s run, shared by its phases: train.cpp sets up, builds and steps; train_report.cpp
// reports what the steps measured and what the planner says of them.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train.h"
#include "train_state.h"

namespace memgrad_cli {

namespace dist = mg::distributed;

// One `memgrad train` run, phase by phase (run_train calls them in order). Its members are what the
// phases share, declared in the order they are made, so they are destroyed in reverse, as locals were.
struct TrainRun {
  explicit TrainRun(const TrainFlags& flags) : f(flags), data(flags) {}
  void set_up();                   // processes, device, limits, the plan's policy, a saved state, the data loader
  void build();                    // the model and its trainer, the saved state loaded, the run's header
  void run_steps();                // the steps: progress, log, peaks, timeline, profile
  void report_training();          // time, loss, held-out loss, sample, and the memory at the peak
  void report_plan();              // the same steps planned on meta, against the measured peaks
  void report_ranks_and_state();   // every rank's figures, the optimizer state, the files written
  void report_timed_plan() const;  // --plan: each step against the plan carried out
  std::map<std::string, int64_t> owners_since_base(std::map<std::string, int64_t> owners) const;

  const TrainFlags& f;
  TrainData data;               // the files opened and checked against the flags, nothing allocated yet
  bool offload_params = false;  // --offload params
  dist::ProcessGroup* world = nullptr;
  int rank = 0, ranks = 1;
  StepFlags step_flags;  // this rank's
  mg::Device device = mg::kCPU;
  bool budgeted = false;
  mg::train::ModelSpec spec;
  mg::train::InputShape shape;
  mg::train::Policy policy;
  std::optional<mg::plan::TimedPlan> timed;  // --plan: the plan carried out (its policy, budget and runtime)
  std::vector<double> step_seconds;          // --plan: each step's wall time
  std::vector<int64_t> step_peaks;           // --plan: each step's allocated peak
  std::optional<int64_t> tokens;             // per step, this rank's (mlp: rows)
  std::string signature;
  std::optional<SavedState> saved;
  mg::MemoryStats base;           // before the model was built
  mg::HostMemoryStats host_base;  // --offload params: what it adds
  std::map<std::string, int64_t> base_owners;
  std::optional<mg::cuda::DeviceMemory> driver_before;  // cuda: the driver's view, for the bytes outside the ledger
  std::unique_ptr<dist::ProcessGroup> nccl;
  dist::ProcessGroup* group = nullptr;
  std::optional<mg::train::ChainModel> chain;
  mg::train::StepOptions options;
  std::optional<mg::train::Trainer> trainer;
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
  mg::CategoryBytes after_step{};  // what the last step left held (parameters, gradients, optimizer state)
  mg::HostMemoryStats host_after_step;
  std::map<std::string, int64_t> owners_at_peak;
  int64_t steps_run = 0;
  double communication = 0;
  mg::MemoryStats after;                // after the steps
  mg::plan::StepReport planned;         // the same steps on meta
  int64_t planned_peaks[2] = {-1, -1};  // for the ranks' table
};

}  // namespace memgrad_cli
