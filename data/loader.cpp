#include <memgrad/data/loader.h>

#include <chrono>

#include <memgrad/core/allocator.h>
#include <memgrad/core/memory.h>
#include <memgrad/ops/ops.h>

namespace mg::data {

namespace {
Shape batched(const Field& f, int64_t rows) {
  Shape s = {rows};
  for (int64_t d : f.shape) s.push_back(d);
  return s;
}
// Makes `device` current until it goes out of scope.
struct OnDevice {
  int previous;
  explicit OnDevice(int device) : previous(cuda::current_device()) { cuda::set_device(device); }
  ~OnDevice() { cuda::set_device(previous); }
};
// What the ledger counts for a batch buffer of these byte sizes (each request rounded up).
int64_t ledger_bytes(int64_t data, int64_t target) {
  return int64_t(memory::round_size(size_t(data)) + memory::round_size(size_t(target)));
}
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

BufferCounts buffer_counts(const DataLoaderOptions& o) {
  BufferCounts c;
  c.host = o.num_workers_ > 0 ? o.num_workers_ * o.prefetch_ : o.pin_memory_ ? 1 : 0;
  c.staging = o.pin_memory_ ? 2 : 0;
  c.pinned = o.pin_memory_;
  return c;
}

BufferBytes buffer_bytes(const Field& data, const Field& target, const DataLoaderOptions& o) {
  const BufferCounts c = buffer_counts(o);
  const int64_t d = data.nbytes() * o.batch_size_, t = target.nbytes() * o.batch_size_;
  const int64_t ledger = ledger_bytes(d, t);
  BufferBytes b;
  if (c.pinned)
    b.pinned = c.host * (d + t);
  else
    b.host = c.host * ledger;
  b.staging = c.staging * ledger;
  return b;
}

Example batch_buffer(const Field& data, const Field& target, int64_t batch_size, const Device& device, bool pinned) {
  MemoryScope scope(Category::Input, "data.loader");
  auto make = [&](const Field& f) {
    return pinned ? cuda::empty_pinned(batched(f, batch_size), f.dtype)
                  : empty(batched(f, batch_size), TensorOptions(f.dtype).device(device));
  };
  Example e;
  e.data = make(data);
  e.target = make(target);
  return e;
}

std::vector<Example> plan_buffers(const Field& data, const Field& target, const DataLoaderOptions& o,
                                  const Device& device) {
  const BufferCounts c = buffer_counts(o);
  const DeviceType where = device.is_meta() ? meta_target() : device.type;
  std::vector<Example> held;
  for (int64_t i = 0; where == DeviceType::CPU && !c.pinned && i < c.host; ++i)
    held.push_back(batch_buffer(data, target, o.batch_size_, device));
  for (int64_t i = 0; where == DeviceType::CUDA && i < c.staging; ++i)
    held.push_back(batch_buffer(data, target, o.batch_size_, device));
  return held;
}

struct DataLoader::Slot {
  Example buffer;
  void *data = nullptr, *target = nullptr;  // the buffer's bytes, which workers write
  enum State { Free, Filling, Ready } state = Free;
  int64_t own = -1;  // the batch it holds (or is being filled with)
  std::vector<int64_t> indices;
  std::exception_ptr error;
  std::optional<cuda::Event> copied;  // pin_memory: its last copy to the device, which a refill waits for
};

struct DataLoader::Stage {
  Example buffer;
  cuda::Event staged, released;  // the copy into it (side stream); the copy out of it (the main stream)
  std::vector<int64_t> indices;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const Sampler> sampler,
                       const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  const DataLoaderOptions& o = options_;
  MG_CHECK(dataset_, ValueError, "DataLoader: no dataset");
  MG_CHECK(o.batch_size_ >= 1, ValueError, "DataLoader: expected a batch size >= 1, got ", o.batch_size_);
  MG_CHECK(o.num_workers_ >= 0 && o.prefetch_ >= 1, ValueError,
           "DataLoader: expected num_workers >= 0 and prefetch >= 1, got ", o.num_workers_, " and ", o.prefetch_);
  MG_CHECK(o.replicas_ >= 1 && o.rank_ >= 0 && o.rank_ < o.replicas_ && o.group_ >= 1, ValueError,
           "DataLoader: shard(rank ", o.rank_, ", replicas ", o.replicas_, ", group ", o.group_,
           "): expected 0 <= rank < replicas and group >= 1");
  MG_CHECK(!o.device_.is_meta(), DeviceError, "DataLoader: meta tensors hold no data; plan a loader with plan_buffers");
  MG_CHECK(!o.pin_memory_ || o.device_.is_cuda(), DeviceError,
           "DataLoader: pin_memory page-locks host buffers for copies to a cuda device; the batches go to ", o.device_);
  if (!sampler_) sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  MG_CHECK(sampler_->size() == dataset_->size(), ValueError, "DataLoader: the sampler orders ", sampler_->size(),
           " examples, the dataset holds ", dataset_->size());
  const int64_t n = dataset_->size(), b = o.batch_size_;
  batches_per_epoch_ = o.drop_last_ ? n / b : n / b + (n % b != 0);
  MG_CHECK(batches_per_epoch_ >= 1, ValueError, "DataLoader: the dataset's ", n, " examples hold no full batch of ", b,
           " (drop_last)");
  data_field_ = dataset_->data_field();
  target_field_ = dataset_->target_field();

  const BufferCounts c = buffer_counts(o);
  std::optional<OnDevice> on_device;  // events are made on the current device, and must be on the batches'
  if (c.pinned) on_device.emplace(o.device_.index);
  for (int64_t i = 0; i < c.host; ++i) {
    auto s = std::make_unique<Slot>();
    s->buffer = batch_buffer(data_field_, target_field_, b, kCPU, c.pinned);
    s->data = s->buffer.data.raw_data();
    s->target = s->buffer.target.raw_data();
    if (c.pinned) s->copied.emplace();
    slots_.push_back(std::move(s));
  }
  for (int64_t i = 0; i < c.staging; ++i) {
    auto s = std::make_unique<Stage>();
    s->buffer = batch_buffer(data_field_, target_field_, b, o.device_);
    stages_.push_back(std::move(s));
  }
  if (c.pinned) side_ = cuda::Stream::create(o.device_.index);
  start_workers();
}

DataLoader::~DataLoader() {
  stop_workers();
  if (side_) side_->synchronize();  // no copy reads a buffer that is about to go
}

int64_t DataLoader::global_batch(int64_t own) const {
  const DataLoaderOptions& o = options_;
  return own / o.group_ * (o.replicas_ * o.group_) + o.rank_ * o.group_ + own % o.group_;
}

Position DataLoader::position_of(int64_t global) const {
  return {global / batches_per_epoch_, global % batches_per_epoch_ * options_.batch_size_};
}

std::vector<int64_t> DataLoader::indices_of(int64_t global) const {
  const Position p = position_of(global);
  const int64_t end = std::min(p.example + options_.batch_size_, dataset_->size());
  std::vector<int64_t> indices;
  indices.reserve(size_t(end - p.example));
  for (int64_t i = p.example; i < end; ++i) indices.push_back(sampler_->index(p.epoch, i));
  return indices;
}

void DataLoader::read_into(const std::vector<int64_t>& indices, void* data, void* target) const {
  const int64_t dn = data_field_.nbytes(), tn = target_field_.nbytes();
  for (size_t r = 0; r < indices.size(); ++r)
    dataset_->read(indices[r], static_cast<char*>(data) + int64_t(r) * dn,
                   static_cast<char*>(target) + int64_t(r) * tn);
}

void DataLoader::start_workers() {
  claim_ = next_;
  for (int64_t i = 0; i < options_.num_workers_; ++i) workers_.emplace_back([this] { work(); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  stop_ = false;
  for (auto& s : slots_) s->state = Slot::Free, s->own = -1, s->error = nullptr;
}

void DataLoader::work() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t n = int64_t(slots_.size());
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || slots_[size_t(claim_ % n)]->state == Slot::Free; });
    if (stop_) return;
    const int64_t own = claim_++;
    Slot& s = *slots_[size_t(own % n)];
    s.state = Slot::Filling, s.own = own, s.error = nullptr;
    lock.unlock();
    try {
      if (s.copied) s.copied->synchronize();  // the copy of the batch it held last has finished
      s.indices = indices_of(global_batch(own));
      read_into(s.indices, s.data, s.target);
    } catch (...) {
      s.error = std::current_exception();
    }
    lock.lock();
    s.state = Slot::Ready;
    changed_.notify_all();
  }
}

DataLoader::Slot& DataLoader::wait_ready(int64_t own) {
  Slot& s = *slots_[size_t(own % int64_t(slots_.size()))];
  const auto t0 = std::chrono::steady_clock::now();
  if (workers_.empty()) {  // pin_memory without workers: this thread reads into the one slot
    if (s.own != own) {
      s.own = -1;
      if (s.copied) s.copied->synchronize();
      s.indices = indices_of(global_batch(own));
      read_into(s.indices, s.data, s.target);
      s.own = own, s.state = Slot::Ready;
    }
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return s.own == own && s.state == Slot::Ready; });
  }
  wait_seconds_ += seconds_since(t0);
  if (s.error) {  // read it again from the next call on: the workers start over at this batch
    const std::exception_ptr error = s.error;
    stop_workers();
    start_workers();
    std::rethrow_exception(error);
  }
  return s;
}

void DataLoader::stage(int64_t own) {
  Slot& s = wait_ready(own);
  Stage& st = *stages_[size_t(own % 2)];
  const int64_t rows = int64_t(s.indices.size());
  st.released.wait(*side_);  // the main stream has copied out the batch this buffer held before
  {
    cuda::StreamGuard on_side(*side_);
    cuda::copy_async(st.buffer.data.narrow(0, 0, rows), s.buffer.data.narrow(0, 0, rows));
    cuda::copy_async(st.buffer.target.narrow(0, 0, rows), s.buffer.target.narrow(0, 0, rows));
    st.staged.record(*side_);
    s.copied->record(*side_);
  }
  st.indices = s.indices;
  staged_ = own;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.state = Slot::Free;                         // a worker refilling it waits for `copied` first
    if (workers_.empty()) s.state = Slot::Ready;  // without workers the slot still holds `own` until refilled
  }
  changed_.notify_all();
}

Batch DataLoader::deliver(int64_t own) {
  const Device dev = options_.device_;
  const int64_t global = global_batch(own);
  MemoryScope input(Category::Input);  // the batch is the user's input, whichever op makes it
  Batch b;
  b.position = position_of(global);
  if (!stages_.empty()) {  // pin_memory: from the staging buffer the side stream filled
    if (staged_ < own) stage(own);
    Stage& st = *stages_[size_t(own % 2)];
    const int64_t rows = int64_t(st.indices.size());
    const cuda::Stream main = cuda::current_stream(dev.index);
    st.staged.wait(main);
    b.data = empty(batched(data_field_, rows), TensorOptions(data_field_.dtype).device(dev));
    b.data.copy_(st.buffer.data.narrow(0, 0, rows));
    b.target = empty(batched(target_field_, rows), TensorOptions(target_field_.dtype).device(dev));
    b.target.copy_(st.buffer.target.narrow(0, 0, rows));
    st.released.record(main);
    b.indices = st.indices;
    if (!workers_.empty()) {  // queue the next batch's copy now if it is read: it overlaps this step
      const Slot& n = *slots_[size_t((own + 1) % int64_t(slots_.size()))];
      bool ready;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready = n.own == own + 1 && n.state == Slot::Ready && !n.error;
      }
      if (ready) stage(own + 1);
    }
    return b;
  }
  if (slots_.empty()) {  // no workers: read here, into the batch (on a device, through host tensors)
    const auto t0 = std::chrono::steady_clock::now();
    b.indices = indices_of(global);
    const int64_t rows = int64_t(b.indices.size());
    Tensor data = empty(batched(data_field_, rows), data_field_.dtype);
    Tensor target = empty(batched(target_field_, rows), target_field_.dtype);
    read_into(b.indices, data.raw_data(), target.raw_data());
    wait_seconds_ += seconds_since(t0);
    b.data = data.to(dev);
    b.target = target.to(dev);
    return b;
  }
  Slot& s = wait_ready(own);  // a worker read it
  const int64_t rows = int64_t(s.indices.size());
  auto take = [&](const Tensor& buffer) {
    const Tensor read = buffer.narrow(0, 0, rows);
    return dev.is_cpu() ? read.clone() : read.to(dev);
  };
  b.data = take(s.buffer.data);
  b.target = take(s.buffer.target);
  b.indices = s.indices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.state = Slot::Free;
  }
  changed_.notify_all();
  return b;
}

std::optional<Batch> DataLoader::next() {
  const int64_t epoch = global_batch(next_) / batches_per_epoch_;
  if (epoch > epoch_) {
    epoch_ = epoch;
    return std::nullopt;
  }
  Batch b = deliver(next_);
  ++next_;
  return b;
}

Batch DataLoader::next_batch() {
  std::optional<Batch> b = next();
  return b ? std::move(*b) : std::move(*next());
}

Position DataLoader::position() const {
  const DataLoaderOptions& o = options_;
  // At a group's start: the shared sequence's next group, where every process's next group starts.
  const int64_t global = next_ % o.group_ == 0 ? next_ / o.group_ * (o.replicas_ * o.group_) : global_batch(next_);
  return position_of(global);
}

void DataLoader::set_position(const Position& p) {
  const DataLoaderOptions& o = options_;
  MG_CHECK(p.epoch >= 0 && p.example >= 0 && p.example < dataset_->size() && p.example % o.batch_size_ == 0 &&
               p.example / o.batch_size_ < batches_per_epoch_,
           ValueError, "DataLoader::set_position: example ", p.example, " of epoch ", p.epoch,
           " does not start a batch (batches of ", o.batch_size_, ", ", batches_per_epoch_, " an epoch)");
  const int64_t global = p.epoch * batches_per_epoch_ + p.example / o.batch_size_;
  const int64_t round = global / (o.replicas_ * o.group_), at = global % (o.replicas_ * o.group_);
  const int64_t first = o.rank_ * o.group_;  // this process's first batch of a round
  stop_workers();
  next_ = at <= first             ? round * o.group_
          : at < first + o.group_ ? round * o.group_ + at - first
                                  : (round + 1) * o.group_;
  epoch_ = p.epoch;
  staged_ = -1;
  start_workers();
}

BufferBytes DataLoader::bytes() const {
  BufferBytes b;
  auto ledger = [](const Example& e) { return ledger_bytes(int64_t(e.data.nbytes()), int64_t(e.target.nbytes())); };
  for (const auto& s : slots_) {
    if (s->copied)  // page-locked
      b.pinned += int64_t(s->buffer.data.nbytes() + s->buffer.target.nbytes());
    else
      b.host += ledger(s->buffer);
  }
  for (const auto& s : stages_) b.staging += ledger(s->buffer);
  return b;
}

}  // namespace mg::data
