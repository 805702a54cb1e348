// `memgrad train`: trains the planner's GPT on --data or the embedded sonnets (data_source.h) or its
// MLP on a synthetic teacher, showing loss, throughput and live memory, then the memory report.
#pragma once
#include <string>

#include "data_source.h"
#include "options.h"

namespace memgrad_cli {

struct TrainFlags {
  ModelFlags model{"tiny"};
  StepFlags step{16, 64, mg::optim::default_optimizer(), 0.0, "fp32", "none", 0, 1, 1.0};  // clip 1.0 by default
  std::string device = "auto";
  int64_t steps = 400;
  double lr = 3e-3;
  int64_t warmup = 20;                  // steps of linear learning-rate warmup
  uint64_t memory_limit = 0;            // bytes (0: none)
  std::string remat = "none";           // none | dynamic: evict and recompute to stay under --memory-limit
  std::string offload = "none";         // none | activations | optimizer | all: the host pool (core/budget/budget.h)
  std::string budget_cost = "modeled";  // modeled | measured: how eviction prices and ages storages
  std::string plan;                     // mixed (chosen under --budget) or a file memgrad plan --save-plan wrote
  std::string cost_model = "fit";       // --plan mixed: fit (on this cpu) | fixed
  uint64_t seed = 1337;
  std::string save, resume;
  std::string timeline = "memgrad-timeline.html";
  std::string snapshot;        // the same history as JSON, for `memgrad view`
  int64_t timeline_steps = 3;  // steps recorded in the timeline
  std::string log;             // CSV of step, loss, tokens/s, allocated
  int64_t log_every = 0;       // 0: about 20 lines (a live bar on a terminal)
  int64_t sample = 200;        // GPT: bytes of text generated at the end
  bool quiet = false;
  bool profile = false;  // time by kernel over the steps after the first
  DataFlags data;        // --data, --val-data, --show-batch
};

void add_train_flags(CLI::App& app, TrainFlags& f);
int run_train(const TrainFlags& f);

}  // namespace memgrad_cli
