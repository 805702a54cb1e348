// Process groups: the processes of a data-parallel run and the collectives between them, on
// existing engines. MPI (OpenMPI) moves cpu tensors; NCCL moves cuda tensors on a side stream. The
// processes are the ones a launcher started (`mpirun -np N`); rank and size come from it.
//
//   distributed::ProcessGroup& world = distributed::world();  // MPI under mpirun, else this process alone
//   world.all_reduce(t).wait();                                // every rank's t becomes the sum
//
// Collectives take contiguous tensors and return a Work handle at once: the operation runs while
// the caller goes on (MPI on the group's own thread, NCCL on its stream) and wait() makes its result
// usable. Every rank must issue the same collectives in the same order. Meta tensors move nothing
// (a plan on meta runs the same calls). The buffers a collective reads and writes are the caller's
// tensors, so they are in the ledger under the caller's category and owner; the engines' own
// internal buffers (MPI's, NCCL's) are outside it, like the CUDA context.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <memgrad/core/error.h>
#include <memgrad/core/tensor.h>

namespace mg::distributed {

// A collective failed inside MPI or NCCL (the message carries the engine's).
class CommunicationError : public Error {
  using Error::Error;
};

enum class ReduceOp { Sum, Max, Min };
const char* reduce_op_name(ReduceOp op);

// A collective in flight. wait() returns when its result may be used by what follows on this
// process: on cpu the output is written; on cuda the current stream waits for it (the host does
// not). It keeps the tensors it uses alive until then; wait before dropping it. Errors of the
// collective are raised by wait(), and so is a collective that does not complete within
// collective_timeout() (CommunicationError): a rank died or is stuck, or the ranks issued different
// collectives. After a timeout the collective may still complete: its tensors stay alive, and wait()
// may be called again; memgrad's command ends every rank instead (distributed::abort).
class Work {
 public:
  struct State;
  Work() = default;  // a completed collective
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void wait();
  bool completed() const;

 private:
  std::shared_ptr<State> state_;
};

// Seconds a Work::wait (on cpu tensors and host values: MPI) waits before it raises
// CommunicationError; 0 waits forever. MG_COLLECTIVE_TIMEOUT in the environment sets it at the first
// wait (default 600, as generous as NCCL's ten minutes).
double collective_timeout();
void set_collective_timeout(double seconds);

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;  // "mpi", "nccl", "simulated" (a rank of a plan), "local" (alone)

  // In place: every rank's `t` becomes the reduction of all ranks' `t`.
  Work all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  // `input` holds size() equal chunks; rank r's `output` (one chunk) becomes the reduction over all
  // ranks of their chunk r.
  Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  // `output` holds size() chunks; chunk r becomes rank r's `input`. `input` may be this rank's chunk
  // of `output` itself (in place).
  Work all_gather(const Tensor& output, const Tensor& input);
  // Every rank's `t` becomes rank `root`'s.
  Work broadcast(const Tensor& t, int root);
  void barrier();

  // Host values, outside the ledger (losses, flags, norms, byte counts). They run in order with
  // the tensor collectives already issued, and return the result.
  double all_reduce(double value, ReduceOp op = ReduceOp::Sum);
  std::vector<double> all_reduce(std::vector<double> values, ReduceOp op = ReduceOp::Sum);  // elementwise
  // Every rank's `values` (the same length on every rank), rank after rank.
  std::vector<int64_t> all_gather(const std::vector<int64_t>& values);
  // Rank `root`'s `bytes` on every rank.
  std::string broadcast(const std::string& bytes, int root);

 protected:
  enum class Kind { AllReduce, ReduceScatter, AllGather, Broadcast, Barrier };
  struct Call {
    Kind kind;
    Tensor output, input;  // all_reduce and broadcast: output only
    ReduceOp op = ReduceOp::Sum;
    int root = 0;
  };
  // Runs a validated collective on tensors of the backend's device (never meta).
  virtual Work launch(const Call& call) = 0;
  // Throws DeviceError unless the backend moves tensors of `d` (meta is checked before).
  virtual void check_device(const Device& d) const = 0;
  virtual void host_all_reduce(double* values, int64_t n, ReduceOp op) = 0;
  virtual void host_all_gather(const int64_t* in, int64_t n, int64_t* out) = 0;
  virtual void host_broadcast(std::string& bytes, int root) = 0;

 private:
  Work run(Call call, const char* name);
  int rank_, size_;
};

// ---- groups

// The processes the launcher started: under `mpirun` with more than one process (OMPI_COMM_WORLD_SIZE
// or PMI_SIZE in the environment) an MPI group over MPI_COMM_WORLD, initialised at the first call and finalised
// at exit; otherwise a group of this process alone (size 1). DeviceError when launched by mpirun
// but built without MPI.
ProcessGroup& world();
// The number of processes the launcher's environment announces (1 when none), and this one's rank
// among them (0 when none).
int launched_world_size();
int launched_rank();
// This process's index among those on its machine (for choosing a GPU); its rank when unknown.
int local_rank();
bool mpi_built();
bool nccl_built();
// Ends every process of world() at once with `code` (MPI_Abort), so that an error on one rank does
// not leave the others waiting in a collective; just this process when it runs alone.
[[noreturn]] void abort(int code);

// A group of this process alone, or the simulated rank `rank` of `size` that the planner runs on
// meta: collectives move nothing (meta tensors only, or any tensor when size is 1, where every
// collective is the identity) and host values combine as if every rank held this one's.
std::unique_ptr<ProcessGroup> simulated_group(int rank = 0, int size = 1);
// NCCL over cuda:`device`, one communicator for the ranks of `bootstrap` (which carries NCCL's id
// from rank 0 and the host values). Collectives run on a stream of its own that waits for the
// current stream's work; Work::wait makes the current stream wait for them. DeviceError when built
// without NCCL.
std::unique_ptr<ProcessGroup> new_nccl_group(ProcessGroup& bootstrap, int device);

}  // namespace mg::distributed
