// What distributed/ shares privately: the state behind a Work handle, the backends' factories, and
// the buffers communication runs on.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <memgrad/core/memory.h>
#include <memgrad/distributed/process_group.h>
#include <memgrad/ops/ops.h>

namespace mg::distributed {

struct Work::State {
  std::mutex mutex;
  std::condition_variable cv;
  std::string what;   // "all_gather of 1024 float32 elements": for the timeout's message
  bool done = false;  // set by the thread that ran the collective (on cuda: once it is queued)
  std::exception_ptr error;
  std::vector<Tensor> keep;            // the collective's tensors, released by wait() on the waiting thread
  std::function<void()> device_wait;   // cuda: makes the current stream wait for the collective
  std::function<bool()> device_query;  // cuda: whether the collective has finished on the device
  void finish(std::exception_ptr e = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
};

namespace detail {
// A fresh buffer of n elements for communication, booked under `category` and `owner` (in the end
// absolute: the label does not stay nested inside whatever scope the caller, e.g. backward, runs in).
inline Tensor comm_buffer(int64_t n, DType dtype, const Device& device, Category category, const std::string& owner,
                          bool zeroed) {
  Tensor t;
  {
    MemoryScope scope(category, owner);
    t = zeroed ? zeros({n}, TensorOptions(dtype).device(device)) : empty({n}, TensorOptions(dtype).device(device));
  }
  t.storage()->set_category(category);
  t.storage()->set_owner(owner);
  return t;
}

// For each of `items`, whether `flag(item)` holds on any rank (collective): e.g. which parameters got
// a gradient anywhere.
template <class T, class F>
std::vector<bool> on_any_rank(ProcessGroup& group, const std::vector<T>& items, F flag) {
  std::vector<double> v;
  for (const T& item : items) v.push_back(flag(item) ? 1.0 : 0.0);
  v = group.all_reduce(std::move(v), ReduceOp::Max);
  return std::vector<bool>(v.begin(), v.end());
}

// MPI_COMM_WORLD as a group (initialises MPI); DeviceError when built without MPI.
std::unique_ptr<ProcessGroup> mpi_world();
// MPI_Abort on MPI_COMM_WORLD when MPI is initialised; returns otherwise.
void mpi_abort(int code);
}  // namespace detail

}  // namespace mg::distributed
