// What the backends share (private to distributed/): the state behind a Work handle, and the
// backends' factories.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <memgrad/distributed/process_group.h>

namespace mg::distributed {

struct Work::State {
  std::mutex mutex;
  std::condition_variable cv;
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
// MPI_COMM_WORLD as a group (initialises MPI); DeviceError when built without MPI.
std::unique_ptr<ProcessGroup> mpi_world();
// MPI_Abort on MPI_COMM_WORLD when MPI is initialised; returns otherwise.
void mpi_abort(int code);
}  // namespace detail

}  // namespace mg::distributed
