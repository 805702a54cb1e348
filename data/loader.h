// The DataLoader: batches of a Dataset in a Sampler's order, read ahead by background threads, as
// libtorch's torch::data::DataLoader and PyTorch's DataLoader.
//
//   auto tokens = mg::data::Tokens::open("corpus/");                  // text: bytes, mapped, not loaded
//   auto windows = std::make_shared<mg::data::TokenWindows>(tokens, 64);
//   mg::data::DataLoader loader(windows, std::make_shared<mg::data::ShuffledSampler>(windows->size(), 1337),
//                               mg::data::DataLoaderOptions(16).num_workers(2).drop_last(true));
//   for (mg::data::Batch& b : loader) train(b.data, b.target);      // one epoch; next() goes on
//
// Memory, to the byte: the loader holds its buffers for its whole life, made when it is built, as
// Input owned by "data.loader" (a plan that builds the same loader counts them: plan_buffers):
// - host: num_workers * prefetch batches that the workers fill (one with pin_memory and no workers);
//   page-locked with pin_memory, and then outside every ledger (cuda::pinned_bytes counts them);
// - staging (pin_memory on cuda): two batches on the device, which asynchronous copies on a side
//   stream fill while the step before runs.
// Each batch next() returns is fresh: allocated when next() is called, on options.device, as Input
// (the data first, then the target), and released when its last handle goes. Workers never
// allocate, so what the ledger sees is the same in every run, whatever the threads' timing.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <memgrad/core/cuda.h>
#include <memgrad/data/dataset.h>
#include <memgrad/data/sampler.h>

namespace mg::data {

struct DataLoaderOptions {
  int64_t batch_size_ = 1;
  bool drop_last_ = false;   // drop each epoch's last batch when it is short (every batch the same shape)
  int64_t num_workers_ = 0;  // background threads reading batches; 0: next() reads them itself
  int64_t prefetch_ = 2;     // batches each worker reads ahead
  bool pin_memory_ = false;  // page-locked host buffers and copies on a side stream (device: cuda)
  Device device_ = kCPU;     // where next() puts the batches
  int64_t rank_ = 0, replicas_ = 1, group_ = 1;  // see shard()
  DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}
  DataLoaderOptions& batch_size(int64_t v) { return batch_size_ = v, *this; }
  DataLoaderOptions& drop_last(bool v = true) { return drop_last_ = v, *this; }
  DataLoaderOptions& num_workers(int64_t v) { return num_workers_ = v, *this; }
  DataLoaderOptions& prefetch(int64_t v) { return prefetch_ = v, *this; }
  DataLoaderOptions& pin_memory(bool v = true) { return pin_memory_ = v, *this; }
  DataLoaderOptions& device(const Device& v) { return device_ = v, *this; }
  // Data parallelism: the loader of process `rank` of `replicas` takes `group` consecutive batches
  // (its micro-batches of a step) out of every replicas * group of the one sequence all processes
  // share, so N processes see what one process with N times the micro-batches sees.
  DataLoaderOptions& shard(int64_t rank, int64_t replicas, int64_t group = 1) {
    return rank_ = rank, replicas_ = replicas, group_ = group, *this;
  }
};

// How many batch buffers a loader with these options holds (see the top of this file).
struct BufferCounts {
  int64_t host = 0, staging = 0;
  bool pinned = false;  // the host ones are page-locked
};
BufferCounts buffer_counts(const DataLoaderOptions& options);
// Their bytes, from the fields alone: host ones as the cpu ledger counts them (none when page-locked),
// page-locked ones (exact), staging ones as the device's ledger counts them. DataLoader::bytes()
// measures the same on the buffers it made.
struct BufferBytes {
  int64_t host = 0, pinned = 0, staging = 0;
};
BufferBytes buffer_bytes(const Field& data, const Field& target, const DataLoaderOptions& options);
// A batch of `batch_size` examples of the fields: Input, owned by "data.loader", on `device`
// (page-locked host memory when `pinned`).
Example batch_buffer(const Field& data, const Field& target, int64_t batch_size, const Device& device,
                     bool pinned = false);
// The loader's buffers that live on `device`, allocated there in the order the loader allocates
// them: on the meta device, those on the device the plan is for (meta_target()). What a planned
// program makes to count a DataLoader it stands for; keep them alive while it runs.
std::vector<Example> plan_buffers(const Field& data, const Field& target, const DataLoaderOptions& options,
                                  const Device& device);

// Where a loader is in its sampler's order: the next batch starts at `example` of `epoch`.
struct Position {
  int64_t epoch = 0, example = 0;
  bool operator==(const Position& o) const { return epoch == o.epoch && example == o.example; }
};

struct Batch {
  Tensor data, target;           // [rows, data_field...] and [rows, target_field...] on options.device
  std::vector<int64_t> indices;  // the dataset's examples in its rows
  Position position;             // of its first row
};

class DataLoader {
 public:
  // ValueError for options out of range (batch_size, num_workers, prefetch, shard) or when an epoch
  // holds no batch; DeviceError for pin_memory on a device that is not cuda. `sampler` null: a
  // SequentialSampler; its size must be the dataset's.
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const Sampler> sampler,
             const DataLoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // This process's next batch, or nullopt once when an epoch ends (the call after it starts the
  // next epoch). An error reading a batch (the dataset's, from a worker) is thrown here, in order;
  // the position stays at that batch, so the next call tries it again.
  std::optional<Batch> next();
  // The next batch, going on into the next epoch at an epoch's end (training by steps).
  Batch next_batch();

  // Where the next batch starts. At the end of a shard's group of batches it is where the next group
  // of the shared sequence starts, the same in every process: what a training state saves.
  Position position() const;
  // Goes on from `p` (the first of this process's batches at or after it); batches read ahead are
  // dropped. ValueError for a position that is not a batch's start.
  void set_position(const Position& p);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }  // of the shared sequence
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }
  // The loader's own buffers: bytes in the cpu ledger, page-locked, in options.device's ledger.
  BufferBytes bytes() const;
  // Seconds next() spent blocked waiting for workers, or reading batches itself without workers.
  double wait_seconds() const { return wait_seconds_; }

  // One epoch from the current position: for (Batch& b : loader) ...
  class Iterator {
   public:
    Batch& operator*() { return *batch_; }
    Batch* operator->() { return &*batch_; }
    Iterator& operator++() { return batch_ = loader_->next(), *this; }
    bool operator!=(const Iterator& o) const { return batch_.has_value() != o.batch_.has_value(); }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, std::optional<Batch> batch) : loader_(loader), batch_(std::move(batch)) {}
    DataLoader* loader_;
    std::optional<Batch> batch_;
  };
  Iterator begin() { return Iterator(this, next()); }
  Iterator end() { return Iterator(this, std::nullopt); }

 private:
  struct Slot;                              // a host buffer and the batch it holds
  int64_t global_batch(int64_t own) const;  // this process's own batch number -> the shared sequence's
  Position position_of(int64_t global) const;
  std::vector<int64_t> indices_of(int64_t global) const;
  void read_into(const std::vector<int64_t>& indices, void* data, void* target) const;
  void work();  // a worker thread's loop
  Slot& wait_ready(int64_t own);
  void start_workers();
  void stop_workers();
  Batch deliver(int64_t own);
  void stage(int64_t own);  // pin_memory on cuda: queues the ready host batch's copy to its staging buffer

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const Sampler> sampler_;
  DataLoaderOptions options_;
  Field data_field_, target_field_;
  int64_t batches_per_epoch_ = 0;
  int64_t next_ = 0;   // this process's next batch (own numbering)
  int64_t epoch_ = 0;  // the epoch next() is in
  double wait_seconds_ = 0;

  struct Stage;  // pin_memory on cuda: a device buffer, the batch copied to it, and its events
  std::vector<std::unique_ptr<Slot>> slots_;    // batch `own` is read into slot own % slots_.size()
  std::vector<std::unique_ptr<Stage>> stages_;  // and copied to stage own % 2
  std::optional<cuda::Stream> side_;            // the copies' stream
  int64_t staged_ = -1;                         // the last batch whose copy was queued

  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::thread> workers_;
  int64_t claim_ = 0;  // the next batch a worker takes
  bool stop_ = false;
};

}  // namespace mg::data
