// The NCCL backend: cuda tensors, one communicator per group. Each collective runs on the group's
// own stream after an event from the current stream (so it sees the values the caller computed),
// and Work::wait makes the current stream wait for it: the host is never blocked. The tensors are
// marked as used on the group's stream (cuda::record_stream), so the caching allocator does not
// hand their blocks out again before the collective has finished.
#include <memgrad/distributed/work_impl.h>

#ifdef MG_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include <memgrad/core/cuda.h>
#endif

namespace mg::distributed {

#ifndef MG_WITH_NCCL

bool nccl_built() { return false; }
std::unique_ptr<ProcessGroup> new_nccl_group(ProcessGroup&, int) {
  throw DeviceError(cuda_built() ? "new_nccl_group: memgrad was built without NCCL (configure with MG_NCCL=ON where "
                                   "nccl.h and libnccl are found)"
                                 : "new_nccl_group: memgrad was built without CUDA");
}

#else

bool nccl_built() { return true; }

namespace {

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw CommunicationError(mg::detail::str("NCCL ", what, " failed: ", ncclGetErrorString(rc)));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case kFloat32:
      return ncclFloat32;
    case kFloat64:
      return ncclFloat64;
    case kFloat16:
      return ncclFloat16;
    case kBFloat16:
      return ncclBfloat16;
    case kInt32:
      return ncclInt32;
    case kUInt8:
      return ncclUint8;
    case kInt8:
      return ncclInt8;
    default:
      return ncclInt64;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : op == ReduceOp::Max ? ncclMax : ncclMin; }

void* device_ptr(const Tensor& t) {
  return static_cast<char*>(t.storage()->data()) + t.storage_offset() * int64_t(t.element_size());
}

// Makes `device` current until the guard dies.
struct DeviceGuard {
  explicit DeviceGuard(int device) : prev(cuda::current_device()) { cuda::set_device(device); }
  ~DeviceGuard() { cuda::set_device(prev); }
  int prev;
};

class NCCLGroup : public ProcessGroup {
 public:
  NCCLGroup(ProcessGroup& bootstrap, int device)
      : ProcessGroup(bootstrap.rank(), bootstrap.size()), bootstrap_(bootstrap), device_(device) {
    check_device_usable(cuda_device(device));
    DeviceGuard guard(device);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const std::string bytes = bootstrap.broadcast(std::string(reinterpret_cast<const char*>(&id), sizeof id), 0);
    std::memcpy(&id, bytes.data(), sizeof id);
    check_nccl(ncclCommInitRank(&comm_, size(), id, rank()), "ncclCommInitRank");
    stream_ = cuda::Stream::create(device);
  }
  ~NCCLGroup() override {
    DeviceGuard guard(device_);
    ncclCommDestroy(comm_);
  }
  std::string backend() const override { return "nccl"; }

 protected:
  void check_device(const Device& d) const override {
    MG_CHECK(d == cuda_device(device_), DeviceError, "NCCL process group: expected tensors on cuda:", device_,
             ", got a tensor on ", d, d.is_cpu() ? " (cpu tensors travel over MPI: distributed::world())" : "");
  }

  Work launch(const Call& c) override {
    DeviceGuard guard(device_);
    if (c.kind == Kind::Barrier) {  // NCCL has none: finish this rank's queued work, then meet on the host
      stream_.synchronize();
      cuda::current_stream(device_).synchronize();
      bootstrap_.barrier();
      return Work();
    }
    cuda::Event ready;
    ready.record(cuda::current_stream(device_));
    ready.wait(stream_);
    auto s = static_cast<cudaStream_t>(stream_.handle());
    void* out = device_ptr(c.output);
    const size_t count = size_t(c.output.numel());
    const ncclDataType_t type = nccl_type(c.output.dtype());
    switch (c.kind) {
      case Kind::AllReduce:
        check_nccl(ncclAllReduce(out, out, count, type, nccl_op(c.op), comm_, s), "all_reduce");
        break;
      case Kind::ReduceScatter:
        check_nccl(ncclReduceScatter(device_ptr(c.input), out, count, type, nccl_op(c.op), comm_, s), "reduce_scatter");
        break;
      case Kind::AllGather:  // in place when the input is this rank's chunk of the output, as NCCL expects
        check_nccl(ncclAllGather(device_ptr(c.input), out, size_t(c.input.numel()), type, comm_, s), "all_gather");
        break;
      case Kind::Broadcast:
        check_nccl(ncclBroadcast(out, out, count, type, c.root, comm_, s), "broadcast");
        break;
      case Kind::Barrier:
        break;
    }
    for (const Tensor& t : {c.output, c.input})
      if (t.defined()) cuda::record_stream(t, stream_);
    auto done = std::make_shared<cuda::Event>();
    done->record(stream_);
    auto state = std::make_shared<Work::State>();
    state->keep = {c.output, c.input};
    const int device = device_;
    state->device_wait = [done, device] {
      DeviceGuard g(device);
      done->wait(cuda::current_stream(device));
    };
    state->device_query = [done, device] {
      DeviceGuard g(device);
      return done->query();
    };
    state->finish();  // queued: the host need not wait
    return Work(state);
  }

  // Host values travel over the bootstrap group.
  void host_all_reduce(double* v, int64_t n, ReduceOp op) override {
    for (int64_t i = 0; i < n; ++i) v[i] = bootstrap_.all_reduce(v[i], op);
  }
  void host_all_gather(const int64_t* in, int64_t n, int64_t* out) override {
    const std::vector<int64_t> all = bootstrap_.all_gather(std::vector<int64_t>(in, in + n));
    std::copy(all.begin(), all.end(), out);
  }
  void host_broadcast(std::string& bytes, int root) override { bytes = bootstrap_.broadcast(bytes, root); }

 private:
  ProcessGroup& bootstrap_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cuda::Stream stream_;
};

}  // namespace

std::unique_ptr<ProcessGroup> new_nccl_group(ProcessGroup& bootstrap, int device) {
  return std::make_unique<NCCLGroup>(bootstrap, device);
}

#endif

}  // namespace mg::distributed
