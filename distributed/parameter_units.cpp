#include <memgrad/distributed/parameter_units.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include <memgrad/core/budget/budget.h>
#include <memgrad/core/cuda.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/host_memory.h>
#include <memgrad/core/memory.h>
#include <memgrad/distributed/work_impl.h>
#include <memgrad/ops/ops.h>

namespace mg::distributed {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Copies between host memory and the device that do not hold up the caller: on cuda on a side stream
// (wait() makes the current stream wait for a copy to the device, and the host for a copy to the
// host), on cpu on a thread of its own (a memcpy), on meta nothing. Copies run in issue order. A copy's
// Work keeps both sides alive; a Work dropped unwaited (a prefetch when the units go) is covered by
// the copier's end, which waits for its stream before the units' host buffers go (not relying on
// cudaFreeHost synchronising: Impl declares the copier after the units, so it goes first).
class Copier {
 public:
  explicit Copier(const Device& d) : device_(d) {
    if (d.is_cuda()) stream_ = cuda::Stream::create(d.index);
  }
  ~Copier() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    if (device_.is_cuda()) try {
        stream_.synchronize();
      } catch (const Error&) {  // a destructor: the device's fault is raised by its next call
      }
  }

  // dst <- src: contiguous, one dtype and size, one of them in host memory.
  Work copy(const Tensor& dst, const Tensor& src, double* seconds) {
    if (dst.is_meta()) return Work();
    auto state = std::make_shared<Work::State>();
    state->keep = {dst, src};
    if (device_.is_cuda()) {
      cuda::Event queued;
      queued.record(cuda::current_stream(device_.index));
      queued.wait(stream_);
      {
        cuda::StreamGuard guard(stream_);
        cuda::copy_async(dst, src);
      }
      cuda::record_stream(dst.device().is_cuda() ? dst : src, stream_);
      auto done = std::make_shared<cuda::Event>();
      done->record(stream_);
      const int index = device_.index;
      const bool to_host = !dst.device().is_cuda();
      state->device_wait = [done, index, to_host] {
        to_host ? done->synchronize() : done->wait(cuda::current_stream(index));
      };
      state->device_query = [done] { return done->query(); };
      state->finish();
      return Work(state);
    }
    void* to = dst.raw_data();
    const void* from = src.raw_data();
    const size_t n = dst.nbytes();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!worker_.joinable()) worker_ = std::thread([this] { serve(); });
      queue_.push_back([=] {
        const auto t0 = Clock::now();
        std::memcpy(to, from, n);
        *seconds += seconds_since(t0);
      });
      states_.push_back(state);
    }
    cv_.notify_all();
    return Work(state);
  }

 private:
  void serve() {
    for (;;) {
      std::function<void()> job;
      std::shared_ptr<Work::State> state;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front()), state = std::move(states_.front());
        queue_.pop_front(), states_.pop_front();
      }
      job();
      state->finish();
    }
  }

  Device device_;
  cuda::Stream stream_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::deque<std::shared_ptr<Work::State>> states_;
  bool stop_ = false;
  std::thread worker_;  // started by the first copy
};

}  // namespace

struct ParameterUnits::Impl {
  struct Param {
    std::string name;
    Tensor tensor;
    size_t unit = 0;
    int64_t offset = 0;  // in its unit's flat buffer
    Tensor piece;        // this rank's piece: a view of the shard
    uint64_t hook = 0;
    bool used = false;  // got a gradient in this step
  };
  struct Unit {
    std::string name;
    std::vector<size_t> params;
    int64_t numel = 0, chunk = 0;
    Tensor flat;        // [chunk * N]: the parameters' storage, its bytes present only while gathered
    Tensor shard;       // [chunk]: this rank's, on the device or in host memory
    Tensor shard_grad;  // [chunk]: this step's reduced gradients, where the shard is
    Tensor grad_home;   // [chunk]: kept, where each step's first reduction writes (N > 1, not offloaded)
    Tensor grad_flat;   // [chunk * N]: the gradients in backward (the parameters' .grad are views)
    enum class State { Released, Gathering, Gathered } state = State::Released;
    Work gather;
    // Why the bytes stay: its forward runs; gathered ahead of its forward or backward; its backward
    // is under way (or, the root and the last unit, is still to come); gather_all.
    bool running = false, prefetched = false, backward = false, whole = false;
    int ready = 0;      // parameters whose gradient is complete in this backward
    bool done = false;  // its backward is complete
    Tensor reduced;     // the reduction's output (grad_flat itself when N == 1)
    Tensor outgoing;    // offloaded: the reduced chunk's copy in host memory
    Work reduction;     // the reduce-scatter; with one rank and offload, the copy out
  };
  enum class Phase { Idle, Forward, Backward };

  ProcessGroup* group;
  UnitOptions options;
  int rank, size;
  Device device;
  std::vector<Param> params;
  std::vector<Unit> units;      // blocks in order, the root last
  std::deque<size_t> reducing;  // launched, not completed, in launch order
  size_t next = 0;              // the next unit (in reduction order) to launch
  Phase phase = Phase::Idle;
  UnitStats stats;
  std::unique_ptr<Copier> copier;

  size_t root() const { return units.size() - 1; }
  size_t blocks() const { return units.size() - 1; }
  // Reduction order: the blocks from the last, then the root (the order backward completes them).
  size_t order(size_t i) const { return i < blocks() ? blocks() - 1 - i : root(); }

  void wait_for(Work w, double* seconds) {
    const auto t0 = Clock::now();
    w.wait();
    *seconds += seconds_since(t0);
  }

  // ---- gathering

  void gather(size_t k) {
    Unit& u = units[k];
    if (u.state != Unit::State::Released) return;
    NoGradGuard ng;
    {
      MemoryScope scope(Category::Parameter, u.name + " (gathered)");
      u.flat.storage()->reacquire_bytes(Category::Parameter);
    }
    u.flat.storage()->set_owner(u.name + " (gathered)");
    Tensor mine = u.flat.narrow(0, int64_t(rank) * u.chunk, u.chunk);
    if (!options.offload) {
      u.gather = group->all_gather(u.flat, u.shard);
    } else if (size == 1) {
      u.gather = copier->copy(u.flat, u.shard, &stats.copy_seconds);
    } else {  // the shard reaches the device before the all-gather is issued, in the same order on every rank
      wait_for(copier->copy(mine, u.shard, &stats.copy_seconds), &stats.gather_wait);
      u.gather = group->all_gather(u.flat, mine);
    }
    if (options.offload) stats.copied_bytes += int64_t(u.shard.nbytes());
    ++stats.gathers;
    stats.gathered_bytes += int64_t(u.flat.nbytes());
    u.state = Unit::State::Gathering;
  }

  void finish_gather(Unit& u) {
    if (u.state != Unit::State::Gathering) return;
    Work w = std::move(u.gather);
    u.gather = Work();
    wait_for(std::move(w), &stats.gather_wait);
    u.flat.storage()->mark_refilled();  // the same values as before: tensors saved over it stay valid
    u.state = Unit::State::Gathered;
  }

  void ensure(size_t k) {
    gather(k);
    finish_gather(units[k]);
  }

  void prefetch(size_t k) {
    if (!options.prefetch || k >= blocks() || units[k].state != Unit::State::Released) return;
    gather(k);
    units[k].prefetched = true;
  }

  void release_if_free(size_t k) {
    Unit& u = units[k];
    if (u.running || u.prefetched || u.backward || u.whole || u.state == Unit::State::Released) return;
    finish_gather(u);  // nothing may still write into the bytes
    u.flat.storage()->release_bytes();
    u.state = Unit::State::Released;
  }

  // ---- backward

  // Backward has reached unit k (its output's gradient is complete): its parameters again, and
  // gradient buffers that are views of one flat buffer, so that the reduction needs no copy.
  void pre_backward(size_t k) {
    Unit& u = units[k];
    if (u.done || u.grad_flat.defined()) return;  // once per backward
    ensure(k);
    u.backward = true, u.prefetched = false;
    give_gradient_buffers(u);
    if (k > 0) prefetch(k - 1);
  }

  void give_gradient_buffers(Unit& u) {
    NoGradGuard ng;
    u.grad_flat = detail::comm_buffer(u.chunk * size, u.flat.dtype(), device, Category::Gradient,
                                      u.name + " (gathered grad)", true);
    for (size_t j : u.params) {
      Param& p = params[j];
      Tensor view = u.grad_flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
      if (Tensor g = p.tensor.grad(); g.defined()) view.copy_(g);
      p.tensor.set_grad(view);
    }
  }

  void on_ready(size_t i) {
    Param& p = params[i];
    p.used = true;
    Unit& u = units[p.unit];
    if (++u.ready == int(u.params.size())) backward_done(p.unit);
  }

  // Every parameter of unit k has its gradient: its parameters leave, and the reductions whose turn
  // has come are launched.
  void backward_done(size_t k) {
    Unit& u = units[k];
    u.done = true;
    u.backward = u.prefetched = false;
    release_if_free(k);
    while (next < units.size() && units[order(next)].done) launch(order(next++));
  }

  void launch(size_t k) {
    NoGradGuard ng;
    Unit& u = units[k];
    if (!u.grad_flat.defined()) {
      give_gradient_buffers(u);  // a unit whose backward hook did not run (the root): its gradients copied in
    } else {
      for (size_t j : u.params)  // a gradient that is not (or no longer) the buffer's view is added in
        if (Tensor g = params[j].tensor.grad(); g.defined() && g.storage() != u.grad_flat.storage())
          u.grad_flat.narrow(0, params[j].offset, g.numel()).add_(g.reshape({-1}));
    }
    for (size_t j : u.params) params[j].tensor.set_grad(Tensor());
    if (size == 1) {
      u.reduced = u.grad_flat;
      if (options.offload) u.reduction = copy_out(u, u.reduced);  // to host memory while backward goes on
    } else {
      u.reduced = u.grad_home.defined() && !u.shard_grad.defined()
                      ? u.grad_home
                      : detail::comm_buffer(u.chunk, u.flat.dtype(), device, Category::Gradient,
                                            u.name + " (grad shard)", false);
      u.reduction = group->reduce_scatter(u.reduced, u.grad_flat);
      ++stats.reductions;
      stats.reduced_bytes += int64_t(u.grad_flat.nbytes());
    }
    reducing.push_back(k);
    // One reduction (or copy to host memory) in flight while the next unit's backward runs; with one
    // rank and no offload nothing is in flight: the gradient goes to its shard at once.
    while (reducing.size() > (size > 1 || options.offload ? 1u : 0u)) complete(reducing.front());
  }

  // Copies `chunk` into a fresh buffer in host memory (u.outgoing).
  Work copy_out(Unit& u, const Tensor& chunk) {
    {
      HostMemoryScope in_host(device);
      u.outgoing = detail::comm_buffer(u.chunk, chunk.dtype(), host_device(device), Category::Gradient,
                                       u.name + " (grad shard)", false);
    }
    stats.copied_bytes += int64_t(u.outgoing.nbytes());
    return copier->copy(u.outgoing, chunk, &stats.copy_seconds);
  }

  // The reduced chunk joins this rank's gradient shard (in host memory when offloaded).
  void complete(size_t k) {
    Unit& u = units[k];
    reducing.erase(std::find(reducing.begin(), reducing.end(), k));
    Work w = std::move(u.reduction);
    u.reduction = Work();
    wait_for(std::move(w), &stats.reduce_wait);
    if (options.offload && !u.outgoing.defined())  // N > 1: the reduced chunk goes out now
      wait_for(copy_out(u, u.reduced), &stats.reduce_wait);
    NoGradGuard ng;
    const Tensor chunk = options.offload ? u.outgoing : u.reduced;
    u.grad_flat = u.reduced = u.outgoing = Tensor();
    if (!u.shard_grad.defined()) {
      chunk.storage()->set_category(Category::Gradient);
      chunk.storage()->set_owner(u.name + " (grad shard)");
      u.shard_grad = chunk;
    } else {
      u.shard_grad.add_(chunk);
    }
  }

  void finish() {
    // The units not launched yet, in the same order on every rank (zeros where no gradient came).
    while (next < units.size()) launch(order(next++));
    while (!reducing.empty()) complete(reducing.front());
    // A parameter no rank gave a gradient keeps none, as in one process.
    const std::vector<bool> used = detail::on_any_rank(*group, params, [](const Param& p) { return p.used; });
    NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i) {
      Param& p = params[i];
      if (!p.piece.defined()) continue;
      const Unit& u = units[p.unit];
      p.piece.set_grad(
          !used[i] || !u.shard_grad.defined()
              ? Tensor()
              : u.shard_grad.narrow(0, p.piece.storage_offset() - u.shard.storage_offset(), p.piece.numel()));
    }
    end_pass();
  }

  // Every unit released and the per-backward counts cleared.
  void end_pass() {
    for (size_t k = 0; k < units.size(); ++k) {
      Unit& u = units[k];
      u.running = u.prefetched = u.backward = false;
      u.ready = 0, u.done = false;
      u.grad_flat = Tensor();
      release_if_free(k);
    }
    for (Param& p : params) p.used = false;
    next = 0;
    phase = Phase::Idle;
  }
};

ParameterUnits::ParameterUnits(const nn::NamedTensors& named, ProcessGroup& group, const UnitOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  MG_CHECK(!named.empty(), ValueError, "ParameterUnits: expected parameters, got none");
  m.group = &group, m.options = options, m.rank = group.rank(), m.size = group.size();
  const Device params_device = named[0].second.device();
  const DType dtype = named[0].second.dtype();
  const bool deferred = nn::is_placeholder(named[0].second);
  MG_CHECK(!deferred || options.deferred, ValueError,
           "ParameterUnits: placeholder parameters (nn::DeferredInit) need UnitOptions::deferred, their recipes");
  m.device = deferred ? options.deferred->device() : params_device;
  for (auto& [name, t] : named) {
    MG_CHECK(t.defined() && t.is_leaf() && t.requires_grad() && is_floating(t.dtype()) && t.is_contiguous(), ValueError,
             "ParameterUnits: expected contiguous floating leaf tensors that require grad, got '", name, "'");
    MG_CHECK(t.device() == params_device && t.dtype() == dtype && nn::is_placeholder(t) == deferred, ValueError,
             "ParameterUnits: expected every parameter on one device in one dtype (", params_device, ", ", dtype,
             deferred ? ", placeholders" : "", "), got '", name, "' on ", t.device(), " in ", t.dtype());
  }
  MG_CHECK(m.device.is_cuda() || m.device.is_cpu() || m.device.is_meta(), DeviceError,
           "ParameterUnits: expected parameters on cpu, cuda or meta, got ", m.device);
  MG_CHECK(m.device.is_meta() || !budget::enabled(m.device), ValueError, "ParameterUnits: ", m.device,
           " is under a memory budget (budget::enable), whose eviction would fight the units' own release of "
           "their bytes; expected a device without one (a plain set_memory_limit works)");
  m.units.resize(options.units.size() + 1);
  for (size_t k = 0; k < options.units.size(); ++k) {
    MG_CHECK(!options.units[k].empty(), ValueError, "ParameterUnits: expected module paths, got an empty one");
    m.units[k].name = options.units[k];
  }
  m.units.back().name = "root";
  for (auto& [name, t] : named) {
    Impl::Param p;
    p.name = name, p.tensor = t, p.unit = m.root();
    for (size_t k = 0; k < options.units.size(); ++k)
      if (name.compare(0, options.units[k].size() + 1, options.units[k] + ".") == 0) {
        p.unit = k;
        break;
      }
    Impl::Unit& u = m.units[p.unit];
    p.offset = u.numel;
    u.numel += t.numel();
    u.params.push_back(m.params.size());
    m.params.push_back(std::move(p));
  }
  for (auto& u : m.units)
    MG_CHECK(!u.params.empty() || &u == &m.units.back(), ValueError, "ParameterUnits: unit '", u.name,
             "' names no parameter (expected parameters named '", u.name, ".*')");
  if (options.offload) m.copier = std::make_unique<Copier>(m.device);

  // Each unit: its parameters laid end to end in the flat buffer, this rank's chunk copied out as its
  // shard, and the parameters made views of the buffer, whose bytes are then released.
  NoGradGuard ng;
  for (auto& u : m.units) {
    u.chunk = std::max<int64_t>(1, (u.numel + m.size - 1) / m.size);
    u.flat = detail::comm_buffer(u.chunk * m.size, dtype, m.device, Category::Parameter, u.name + " (gathered)", true);
    if (deferred) {  // nothing to copy from: the bytes go at once, and the shard is computed
      u.flat.storage()->release_bytes();
      std::optional<HostMemoryScope> in_host;
      if (options.offload) in_host.emplace(m.device);
      u.shard = detail::comm_buffer(u.chunk, dtype, options.offload ? host_device(m.device) : m.device,
                                    Category::Parameter, u.name + " (shard)", true);
      for (size_t j : u.params) {
        const auto [begin, end] = piece(j, m.rank);
        if (end > begin)
          options.deferred->materialize(
              m.params[j].tensor,
              u.shard.narrow(0, m.params[j].offset + begin - int64_t(m.rank) * u.chunk, end - begin), begin);
      }
    } else {
      for (size_t j : u.params) {
        Impl::Param& p = m.params[j];
        u.flat.narrow(0, p.offset, p.tensor.numel()).copy_(p.tensor.detach().reshape({-1}));
      }
      const Tensor mine = u.flat.narrow(0, int64_t(m.rank) * u.chunk, u.chunk);
      std::optional<HostMemoryScope> in_host;
      if (options.offload) in_host.emplace(m.device);
      u.shard = detail::comm_buffer(u.chunk, dtype, options.offload ? host_device(m.device) : m.device,
                                    Category::Parameter, u.name + " (shard)", false);
      u.shard.copy_(mine);
    }
    for (size_t j : u.params) {
      Impl::Param& p = m.params[j];
      p.tensor.set_data(u.flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape()));
      const auto [begin, end] = piece(j, m.rank);
      if (end > begin) p.piece = u.shard.narrow(0, p.offset + begin - int64_t(m.rank) * u.chunk, end - begin);
    }
    if (u.flat.storage()->has_bytes()) u.flat.storage()->release_bytes();
    // Kept from here, as DeepSpeed's grad_partitions_flat_buffer: made in each backward, a gradient shard
    // pinned the freed activation block it was carved from (GPT-2 124M, 8 ranks: 14.16 -> 12.73 GiB reserved).
    if (!options.offload && m.size > 1)
      u.grad_home = detail::comm_buffer(u.chunk, dtype, m.device, Category::Gradient, u.name + " (grad shard)", false);
  }
  Impl* impl = impl_.get();
  for (size_t i = 0; i < m.params.size(); ++i)
    m.params[i].hook =
        m.params[i].tensor.register_post_accumulate_grad_hook([impl, i](const Tensor&) { impl->on_ready(i); });
}

ParameterUnits::~ParameterUnits() {
  Impl& m = *impl_;
  for (auto& p : m.params) p.tensor.remove_post_accumulate_grad_hook(p.hook);
  for (auto& u : m.units)  // collectives still in flight finish before their tensors go
    for (Work* w : {&u.gather, &u.reduction}) try {
        w->wait();
      } catch (const Error&) {
      }
}

size_t ParameterUnits::size() const { return impl_->units.size(); }
const std::string& ParameterUnits::name(size_t unit) const { return impl_->units.at(unit).name; }
int64_t ParameterUnits::elements(size_t unit) const { return impl_->units.at(unit).numel; }
int64_t ParameterUnits::chunk(size_t unit) const { return impl_->units.at(unit).chunk; }
size_t ParameterUnits::unit_of(size_t param) const { return impl_->params.at(param).unit; }
int64_t ParameterUnits::offset(size_t param) const { return impl_->params.at(param).offset; }
bool ParameterUnits::offloaded() const { return impl_->options.offload; }
const Device& ParameterUnits::device() const { return impl_->device; }
const UnitStats& ParameterUnits::stats() const { return impl_->stats; }

std::pair<int64_t, int64_t> ParameterUnits::piece(size_t i, int rank) const {
  const Impl& m = *impl_;
  MG_CHECK(i < m.params.size() && rank >= 0 && rank < m.size, IndexError, "ParameterUnits::piece: parameter ", i,
           " of ", m.params.size(), ", rank ", rank, " of ", m.size);
  const Impl::Param& p = m.params[i];
  const int64_t c = m.units[p.unit].chunk, n = p.tensor.numel();
  const int64_t begin = std::clamp(int64_t(rank) * c - p.offset, int64_t(0), n);
  const int64_t end = std::clamp(int64_t(rank + 1) * c - p.offset, int64_t(0), n);
  return {begin, std::max(begin, end)};
}

int64_t ParameterUnits::longest_piece(size_t i) const {
  const Impl& m = *impl_;
  const Impl::Param& p = m.params.at(i);
  const int64_t c = m.units[p.unit].chunk, n = p.tensor.numel();
  if (n == 0) return 0;
  // The ranks whose chunks meet [offset, offset + n): the first, the last, and the one after the
  // first, whose chunk (if it is not the last) lies inside whole.
  const int first = int(p.offset / c), last = int(std::min<int64_t>(m.size - 1, (p.offset + n - 1) / c));
  int64_t most = 0;
  for (int r : {first, std::min(first + 1, last), last}) {
    const auto [begin, end] = piece(i, r);
    most = std::max(most, end - begin);
  }
  return most;
}

Tensor ParameterUnits::piece_view(size_t i) const { return impl_->params.at(i).piece; }

void ParameterUnits::prepare_forward() {
  Impl& m = *impl_;
  if (m.phase == Impl::Phase::Forward) m.end_pass();  // the forward before had no backward (evaluation)
  m.phase = Impl::Phase::Forward;
  m.ensure(m.root());
  m.units[m.root()].backward = true;  // held until its gradients are reduced
  if (m.blocks() > 0) m.prefetch(0);
}

Tensor ParameterUnits::run(size_t k, const std::function<Tensor()>& forward) {
  Impl& m = *impl_;
  MG_CHECK(k < m.blocks(), IndexError, "ParameterUnits::run: expected a unit below ", m.blocks(), ", got ", k);
  Impl::Unit& u = m.units[k];
  m.ensure(k);
  const bool forward_phase = m.phase == Impl::Phase::Forward;
  if (forward_phase) u.prefetched = false;  // in a recompute (backward) a prefetch is kept for the backward
  u.running = true;
  if (forward_phase) m.prefetch(k + 1);
  Tensor y;
  try {
    y = forward();
  } catch (...) {
    u.running = false;
    m.release_if_free(k);
    throw;
  }
  u.running = false;
  if (y.defined() && y.requires_grad()) {
    Impl* impl = impl_.get();
    y.register_hook([impl, k](const Tensor&) {
      impl->pre_backward(k);
      return Tensor();
    });
    if (forward_phase && k + 1 == m.blocks()) u.backward = true;  // the last unit: its backward is next
  }
  m.release_if_free(k);
  return y;
}

void ParameterUnits::prepare_backward() {
  Impl& m = *impl_;
  m.phase = Impl::Phase::Backward;
  Impl::Unit& root = m.units[m.root()];
  if (root.state != Impl::Unit::State::Released && !root.grad_flat.defined()) m.give_gradient_buffers(root);
}

void ParameterUnits::finish_backward() { impl_->finish(); }

void ParameterUnits::reset(bool set_to_none) {
  Impl& m = *impl_;
  for (auto& u : m.units) {
    for (Work* w : {&u.gather, &u.reduction}) try {
        w->wait();
      } catch (const Error&) {
      }
    if (u.state == Impl::Unit::State::Gathering) u.state = Impl::Unit::State::Gathered;
    u.gather = u.reduction = Work();
    u.reduced = u.outgoing = Tensor();
    for (size_t j : u.params) m.params[j].tensor.set_grad(Tensor());
    NoGradGuard ng;
    if (set_to_none || !u.shard_grad.defined())
      u.shard_grad = Tensor();
    else
      u.shard_grad.zero_();
  }
  m.reducing.clear();
  m.end_pass();
  for (auto& p : m.params)
    if (p.piece.defined() && set_to_none) p.piece.set_grad(Tensor());
}

std::unique_ptr<ParameterUnits::Gathered> ParameterUnits::gather_all() {
  Impl& m = *impl_;
  for (size_t k = 0; k < m.units.size(); ++k) m.gather(k);
  for (size_t k = 0; k < m.units.size(); ++k) {
    m.finish_gather(m.units[k]);
    m.units[k].whole = true;
  }
  return std::unique_ptr<Gathered>(new Gathered(this));
}

ParameterUnits::Gathered::~Gathered() {
  Impl& m = *units_->impl_;
  for (size_t k = 0; k < m.units.size(); ++k) {
    m.units[k].whole = false;
    m.release_if_free(k);
  }
}

}  // namespace mg::distributed
