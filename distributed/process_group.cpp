#include <memgrad/distributed/process_group.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <memgrad/core/env.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/distributed/work_impl.h>

namespace mg::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

// ---- Work

namespace {
std::atomic<double> g_timeout{-1};  // < 0: not read from the environment yet
}  // namespace

double collective_timeout() {
  double t = g_timeout.load();
  if (t < 0) {
    const char* v = std::getenv("MG_COLLECTIVE_TIMEOUT");
    const std::optional<double> seconds = v && *v ? env::parse_seconds(v) : 600.0;
    if (!seconds)  // read inside a wait, which cannot raise for it: said once (core/env.h), 600 kept
      env::warn_ignored(env::message("MG_COLLECTIVE_TIMEOUT", v, env::kSecondsExpected));
    t = seconds.value_or(600.0);
    g_timeout.store(t);
  }
  return t;
}

void set_collective_timeout(double seconds) {
  MG_CHECK(seconds >= 0 && std::isfinite(seconds), ValueError,
           "set_collective_timeout: expected seconds >= 0 (0: no timeout), got ", seconds);
  g_timeout.store(seconds);
}

void Work::wait() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  const double timeout = collective_timeout();
  auto done = [this] { return state_->done; };
  if (timeout == 0)
    state_->cv.wait(lock, done);
  else if (!state_->cv.wait_for(lock, std::chrono::duration<double>(timeout), done))
    throw CommunicationError(mg::detail::str(
        state_->what.empty() ? "a collective" : state_->what, " did not complete within ", timeout,
        " s: another rank died or is stuck, or the ranks issued different collectives (every rank must issue the "
        "same ones in the same order); MG_COLLECTIVE_TIMEOUT sets the wait in seconds"));
  if (state_->error) {
    auto e = state_->error;
    state_->error = nullptr;
    state_->keep.clear();
    std::rethrow_exception(e);
  }
  if (state_->device_wait) {
    state_->device_wait();
    state_->device_wait = nullptr;
  }
  state_->keep.clear();
}

bool Work::completed() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done && (!state_->device_query || state_->device_query());
}

// ---- ProcessGroup: argument checks shared by every backend

ProcessGroup::ProcessGroup(int rank, int size) : rank_(rank), size_(size) {
  MG_CHECK(size >= 1 && rank >= 0 && rank < size, ValueError, "ProcessGroup: expected 0 <= rank < size, got rank ",
           rank, " of ", size);
}

namespace {
void check_tensor(const Tensor& t, const char* name, const char* role) {
  MG_CHECK(t.defined(), ValueError, name, ": expected a defined ", role, " tensor");
  MG_CHECK(t.is_contiguous(), ValueError, name, ": expected a contiguous ", role, " tensor, got shape ",
           shape_str(t.shape()), " with strides ", shape_str(t.strides()));
  const DType d = t.dtype();
  MG_CHECK(d != kBool, DTypeError, name,
           ": expected a float32, float64, float16, bfloat16, int64, int32, int8 or uint8 ", role, " tensor, got ", d);
}
}  // namespace

Work ProcessGroup::run(Call call, const char* name) {
  if (call.kind == Kind::Barrier) return launch(call);
  check_tensor(call.output, name, "output");
  if (call.input.defined()) {
    check_tensor(call.input, name, "input");
    MG_CHECK(call.input.dtype() == call.output.dtype(), DTypeError, name,
             ": expected input and output of one dtype, got ", call.input.dtype(), " and ", call.output.dtype());
    MG_CHECK(call.input.device() == call.output.device(), DeviceError, name,
             ": expected input and output on one device, got ", call.input.device(), " and ", call.output.device());
    const int64_t in = call.input.numel(), out = call.output.numel(), n = size_;
    if (call.kind == Kind::ReduceScatter)
      MG_CHECK(in == out * n, ShapeError, name, ": expected an input of ", n, " x the output's ", out,
               " elements (one chunk per rank), got ", in);
    if (call.kind == Kind::AllGather)
      MG_CHECK(out == in * n, ShapeError, name, ": expected an output of ", n, " x the input's ", in,
               " elements (one chunk per rank), got ", out);
    if (call.input.storage() == call.output.storage())  // in place: only all_gather, from this rank's chunk
      MG_CHECK(call.kind == Kind::AllGather &&
                   call.input.storage_offset() == call.output.storage_offset() + int64_t(rank_) * in,
               ValueError, name, ": expected input and output in separate memory",
               call.kind == Kind::AllGather ? ", or the input to be this rank's chunk of the output" : "");
  }
  if (call.kind == Kind::Broadcast)
    MG_CHECK(call.root >= 0 && call.root < size_, ValueError, name, ": expected a root in [0, ", size_, "), got ",
             call.root);
  if (call.output.is_meta()) return Work();  // shapes only: nothing to move
  check_device(call.output.device());
  return launch(call);
}

Work ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  return run({Kind::AllReduce, t, {}, op, 0}, "all_reduce");
}
Work ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  return run({Kind::ReduceScatter, output, input, op, 0}, "reduce_scatter");
}
Work ProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  return run({Kind::AllGather, output, input, ReduceOp::Sum, 0}, "all_gather");
}
Work ProcessGroup::broadcast(const Tensor& t, int root) {
  return run({Kind::Broadcast, t, {}, ReduceOp::Sum, root}, "broadcast");
}
void ProcessGroup::barrier() { run({Kind::Barrier, {}, {}, ReduceOp::Sum, 0}, "barrier").wait(); }

double ProcessGroup::all_reduce(double value, ReduceOp op) {
  host_all_reduce(&value, 1, op);
  return value;
}
std::vector<double> ProcessGroup::all_reduce(std::vector<double> values, ReduceOp op) {
  host_all_reduce(values.data(), int64_t(values.size()), op);
  return values;
}
std::vector<int64_t> ProcessGroup::all_gather(const std::vector<int64_t>& values) {
  std::vector<int64_t> out(values.size() * size_t(size_));
  host_all_gather(values.data(), int64_t(values.size()), out.data());
  return out;
}
std::string ProcessGroup::broadcast(const std::string& bytes, int root) {
  MG_CHECK(root >= 0 && root < size_, ValueError, "broadcast: expected a root in [0, ", size_, "), got ", root);
  std::string b = bytes;
  host_broadcast(b, root);
  return b;
}

// ---- the simulated group

namespace {
class SimulatedGroup : public ProcessGroup {
 public:
  using ProcessGroup::ProcessGroup;
  std::string backend() const override { return size() == 1 ? "local" : "simulated"; }

 protected:
  void check_device(const Device& d) const override {
    MG_CHECK(size() == 1, DeviceError, "simulated process group (rank ", rank(), " of ", size(),
             "): expected meta tensors, got a tensor on ", d,
             "; a simulated rank moves no bytes (run the processes under mpirun for real collectives)");
  }
  // One rank: every collective is the identity, or a copy between the caller's tensors.
  Work launch(const Call& c) override {
    NoGradGuard ng;
    const bool in_place = c.input.defined() && c.output.storage() == c.input.storage() &&
                          c.output.storage_offset() == c.input.storage_offset();
    if ((c.kind == Kind::ReduceScatter || c.kind == Kind::AllGather) && !in_place) Tensor(c.output).copy_(c.input);
    return Work();
  }
  void host_all_reduce(double* v, int64_t n, ReduceOp op) override {
    if (op == ReduceOp::Sum)
      for (int64_t i = 0; i < n; ++i) v[i] *= size();
  }
  void host_all_gather(const int64_t* in, int64_t n, int64_t* out) override {
    for (int r = 0; r < size(); ++r) std::memcpy(out + r * n, in, size_t(n) * sizeof(int64_t));
  }
  void host_broadcast(std::string&, int) override {}
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return *end == '\0' && x >= 0 && x < (1L << 30) ? int(x) : fallback;
}
}  // namespace

std::unique_ptr<ProcessGroup> simulated_group(int rank, int size) {
  return std::make_unique<SimulatedGroup>(rank, size);
}

int launched_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})  // OpenMPI's mpirun; MPICH's hydra
    if (int n = env_int(name, 0); n > 0) return n;
  return 1;
}

int launched_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK"})
    if (int r = env_int(name, -1); r >= 0) return r;
  return 0;
}

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"})
    if (int r = env_int(name, -1); r >= 0) return r;
  return world().rank();
}

ProcessGroup& world() {
  static std::unique_ptr<ProcessGroup> group = launched_world_size() > 1 ? detail::mpi_world() : simulated_group(0, 1);
  return *group;
}

void abort(int code) {
  detail::mpi_abort(code);
  std::exit(code);
}

}  // namespace mg::distributed
