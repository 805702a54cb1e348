// The MPI backend: cpu tensors over OpenMPI. As PyTorch's ProcessGroupMPI, one thread of the group
// makes every MPI call in the order the collectives were issued (MPI_THREAD_SERIALIZED), so the
// caller's thread goes on computing (backward, say) while a bucket of gradients is reduced.
#include <memgrad/distributed/work_impl.h>

#ifdef MG_WITH_MPI
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <thread>
#endif

namespace mg::distributed {

#ifndef MG_WITH_MPI

bool mpi_built() { return false; }
namespace detail {
std::unique_ptr<ProcessGroup> mpi_world() {
  throw DeviceError(mg::detail::str("launched by mpirun with ", launched_world_size(),
                                    " processes, but memgrad was built without MPI (install libopenmpi-dev and "
                                    "configure with MG_MPI=ON)"));
}
void mpi_abort(int) {}
}  // namespace detail

#else

bool mpi_built() { return true; }

namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CommunicationError(mg::detail::str("MPI ", what, " failed: ", std::string(text, size_t(len))));
}

// float16 and bfloat16 reductions, through float (MPI has no 16-bit float type).
template <float (*Load)(uint16_t), uint16_t (*Store)(float), ReduceOp Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = Load(a[i]), y = Load(b[i]);
    b[i] = Store(Op == ReduceOp::Sum ? x + y : Op == ReduceOp::Max ? std::max(x, y) : std::min(x, y));
  }
}
MPI_Op g_half_ops[2][3];  // [float16, bfloat16][sum, max, min], made at initialisation

void create_half_ops() {
  MPI_User_function* fns[2][3] = {{half_reduce<half_to_float, float_to_half, ReduceOp::Sum>,
                                   half_reduce<half_to_float, float_to_half, ReduceOp::Max>,
                                   half_reduce<half_to_float, float_to_half, ReduceOp::Min>},
                                  {half_reduce<bfloat16_to_float, float_to_bfloat16, ReduceOp::Sum>,
                                   half_reduce<bfloat16_to_float, float_to_bfloat16, ReduceOp::Max>,
                                   half_reduce<bfloat16_to_float, float_to_bfloat16, ReduceOp::Min>}};
  for (int t = 0; t < 2; ++t)
    for (int o = 0; o < 3; ++o) check_mpi(MPI_Op_create(fns[t][o], 1, &g_half_ops[t][o]), "MPI_Op_create");
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case kFloat32:
      return MPI_FLOAT;
    case kFloat64:
      return MPI_DOUBLE;
    case kInt32:
      return MPI_INT32_T;
    case kInt64:
      return MPI_INT64_T;
    case kUInt8:
      return MPI_UINT8_T;
    case kInt8:
      return MPI_INT8_T;
    default:
      return MPI_UINT16_T;  // float16, bfloat16: their bits
  }
}

MPI_Op mpi_op(DType t, ReduceOp op) {
  if (t == kFloat16 || t == kBFloat16) return g_half_ops[t == kBFloat16][int(op)];
  return op == ReduceOp::Sum ? MPI_SUM : op == ReduceOp::Max ? MPI_MAX : MPI_MIN;
}

int mpi_count(int64_t n) {
  MG_CHECK(n <= INT_MAX, ValueError, "MPI process group: a collective of ", n,
           " elements exceeds MPI's int counts; split the tensor");
  return int(n);
}

class MPIGroup : public ProcessGroup {
 public:
  MPIGroup(MPI_Comm comm, int rank, int size, bool finalize)
      : ProcessGroup(rank, size), comm_(comm), finalize_(finalize), worker_([this] { serve(); }) {}
  ~MPIGroup() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    MPI_Comm_free(&comm_);
    if (finalize_) {
      for (auto& ops : g_half_ops)
        for (auto& op : ops) MPI_Op_free(&op);
      MPI_Finalize();
    }
  }
  std::string backend() const override { return "mpi"; }
  static const char* kind_name(Kind k) {
    const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"};
    return names[int(k)];
  }

 protected:
  void check_device(const Device& d) const override {
    MG_CHECK(d.is_cpu(), DeviceError, "MPI process group: expected cpu tensors, got a tensor on ", d,
             " (cuda tensors travel over NCCL: distributed::new_nccl_group)");
  }

  Work launch(const Call& c) override {
    auto state = std::make_shared<Work::State>();
    state->keep = {c.output, c.input};
    state->what = mg::detail::str(
        "MPI ", kind_name(c.kind),
        c.output.defined() ? mg::detail::str(" of ", c.output.numel(), " ", c.output.dtype(), " elements") : "",
        " (rank ", rank(), " of ", size(), ")");
    void* out = c.output.defined() ? c.output.raw_data() : nullptr;
    const void* in = c.input.defined() ? c.input.raw_data() : nullptr;
    const int count = c.output.defined() ? mpi_count(c.output.numel()) : 0;
    const MPI_Datatype type = c.output.defined() ? mpi_type(c.output.dtype()) : MPI_BYTE;
    const MPI_Op op = c.output.defined() ? mpi_op(c.output.dtype(), c.op) : MPI_SUM;
    MPI_Comm comm = comm_;
    const Kind kind = c.kind;
    const int root = c.root;
    const int chunk = kind == Kind::AllGather ? mpi_count(c.input.numel()) : 0;
    const bool in_place = kind == Kind::AllGather && c.input.storage() == c.output.storage();  // checked: chunk rank
    enqueue(state, [=] {
      switch (kind) {
        case Kind::AllReduce:
          return check_mpi(MPI_Allreduce(MPI_IN_PLACE, out, count, type, op, comm), "all_reduce");
        case Kind::ReduceScatter:
          return check_mpi(MPI_Reduce_scatter_block(in, out, count, type, op, comm), "reduce_scatter");
        case Kind::AllGather:
          return check_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : in, chunk, type, out, chunk, type, comm),
                           "all_gather");
        case Kind::Broadcast:
          return check_mpi(MPI_Bcast(out, count, type, root, comm), "broadcast");
        case Kind::Barrier:
          return check_mpi(MPI_Barrier(comm), "barrier");
      }
    });
    return Work(state);
  }

  void host_all_reduce(double* v, int64_t n, ReduceOp op) override {
    const int count = mpi_count(n);
    run_now([&] {
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, v, count, MPI_DOUBLE, mpi_op(kFloat64, op), comm_), "all_reduce");
    });
  }
  void host_all_gather(const int64_t* in, int64_t n, int64_t* out) override {
    const int count = mpi_count(n);
    run_now([&] { check_mpi(MPI_Allgather(in, count, MPI_INT64_T, out, count, MPI_INT64_T, comm_), "all_gather"); });
  }
  void host_broadcast(std::string& bytes, int root) override {
    run_now([&] {
      int64_t n = int64_t(bytes.size());
      check_mpi(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm_), "broadcast");
      bytes.resize(size_t(n));
      check_mpi(MPI_Bcast(bytes.data(), mpi_count(n), MPI_CHAR, root, comm_), "broadcast");
    });
  }

 private:
  void enqueue(std::shared_ptr<Work::State> state, std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.emplace_back(std::move(state), std::move(job));
    }
    cv_.notify_all();
  }
  // Runs `job` on the group's thread after the collectives already queued, and waits for it.
  void run_now(std::function<void()> job) {
    auto state = std::make_shared<Work::State>();
    state->what = mg::detail::str("an MPI collective on host values (rank ", rank(), " of ", size(), ")");
    enqueue(state, std::move(job));
    Work(state).wait();
  }
  void serve() {
    for (;;) {
      std::pair<std::shared_ptr<Work::State>, std::function<void()> > item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, with nothing left to run
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        item.second();
        item.first->finish();
      } catch (...) {
        item.first->finish(std::current_exception());
      }
    }
  }

  MPI_Comm comm_;
  bool finalize_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Work::State>, std::function<void()> > > queue_;
  bool stop_ = false;
  std::thread worker_;  // last: it starts serving once everything above exists
};

}  // namespace

namespace detail {

std::unique_ptr<ProcessGroup> mpi_world() {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    MG_CHECK(provided >= MPI_THREAD_SERIALIZED, CommunicationError,
             "MPI: expected thread support MPI_THREAD_SERIALIZED (one thread of memgrad's makes the calls), got level ",
             provided);
  }
  static bool ops_made = false;
  if (!ops_made) create_half_ops(), ops_made = true;
  MPI_Comm comm;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);  // errors become CommunicationError, not an abort
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return std::make_unique<MPIGroup>(comm, rank, size, !initialized);
}

void mpi_abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace detail

#endif

}  // namespace mg::distributed
