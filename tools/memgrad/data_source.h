// What `memgrad train` learns from, read through mg::data's DataLoader: for the GPT, windows of
// --data (text, folders of text, llm.c token shards) or of the embedded sonnets, shuffled, with
// --val-data (or the data's last tenth) held out; for the MLP, a synthetic teacher's rows.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "options.h"

namespace memgrad_cli {

struct TrainFlags;

struct DataFlags {
  std::string data, val_data;
  bool show_batch = false;  // print the first batch's token ids
};
void add_data_flags(CLI::App& app, DataFlags& d);

class TrainData {
 public:
  // Opens --data and --val-data (or the embedded sonnets) and checks them against the flags: a bad
  // file, or a window (--seq) or batch longer than the data, is a UsageError naming the flag. Nothing
  // is allocated in the ledger yet.
  explicit TrainData(const TrainFlags& f);
  ~TrainData();
  bool is_gpt() const { return train_ != nullptr; }
  // `m` with the vocabulary the data needs: the data's when the model's is smaller and --vocab was
  // not given; UsageError when --vocab does not cover it.
  ModelFlags model_flags(const ModelFlags& m) const;
  // Builds the DataLoader on `device` (the MLP's teacher first): its buffers in the ledger, as
  // train_program plans them. This process is rank `rank` of `ranks`, each running s.accum
  // micro-batches a step, and together what one process with ranks * s.accum of them runs.
  void start(const mg::train::ModelSpec& spec, const StepFlags& s, const mg::Device& device, int rank, int ranks);
  // This process's next micro-batch: input and target.
  std::pair<mg::Tensor, mg::Tensor> next();
  std::string str() const;  // what it reads, in a line for the run's header

  // The loader's position and the data it is in, as a training state's metadata, and back (a state
  // saved on other data is a UsageError naming --resume).
  std::map<std::string, std::string> state() const;
  void resume(const std::map<std::string, std::string>& metadata, const std::string& path);

  // GPT: the mean loss over the held-out windows (up to 20 batches of them, consecutive), printed.
  // With `dp` (every rank calls it then: sharded parameters are gathered collectively) the model runs
  // through its units.
  void print_held_out_loss(const mg::train::ChainModel& chain, mg::distributed::DataParallel* dp = nullptr) const;
  // The time the training thread spent waiting for batches, per step, after `steps` steps.
  void print_wait(int64_t steps, double train_seconds) const;
  // The loader's own buffers: in the host ledger, page-locked, in the device's ledger.
  void print_memory() const;

 private:
  uint64_t seed_;
  DataFlags flags_;
  std::shared_ptr<const mg::data::Tokens> train_, held_out_;
  std::shared_ptr<const mg::data::TokenWindows> windows_;  // GPT: what the steps read
  std::shared_ptr<const mg::data::Dataset> dataset_;       // what the loader reads (the MLP: its teacher)
  std::unique_ptr<mg::data::DataLoader> loader_;
  int64_t split_ = 0;  // training tokens: [0, split_) of train_
  int64_t batch_ = 0, seq_ = 0;
  mg::Device device_;
  bool shown_ = false;
};

// `memgrad plan`: checks --pin-memory against the device the plan is for, and prints the buffers the
// loader of these flags holds (none without workers or pinning).
void print_loader_plan(const mg::train::ModelSpec& spec, const StepFlags& s, mg::DeviceType target);

}  // namespace memgrad_cli
