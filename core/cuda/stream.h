// The CUDA device runtime's tensor-free half: devices, streams, events, the memory the CUDA context
// keeps beyond memgrad's own allocations, and the registry of kernel variants. The caching allocator
// (core/memory) keys its blocks by stream and sits below tensors, so it includes this half;
// core/cuda.h adds what takes tensors (record_stream, pinned tensors, asynchronous copies).
// Without MG_CUDA (or without a GPU) queries answer "none" and actions raise DeviceError.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mg::cuda {

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  int64_t total_memory = 0;  // bytes
};
DeviceProperties properties(int device);
int current_device();
void set_device(int device);
// Waits for all work on `device` (-1: the current one).
void synchronize(int device = -1);

// A queue of device work. The default stream (handle null) is CUDA's legacy stream; streams made
// by create() are non-blocking and live while any copy of the Stream does (the caching allocator
// holds one for each stream it keeps segments for, until empty_cache returns them).
class Stream {
 public:
  Stream() = default;
  Stream(int device, std::shared_ptr<void> handle) : device_(device), handle_(std::move(handle)) {}
  static Stream create(int device = -1);
  int device() const { return device_; }
  void* handle() const { return handle_.get(); }  // a cudaStream_t
  bool is_default() const { return !handle_; }
  void synchronize() const;
  bool query() const;  // true when all queued work is done
  bool operator==(const Stream& o) const { return device_ == o.device_ && handle() == o.handle(); }

 private:
  int device_ = 0;
  std::shared_ptr<void> handle_;
};
// The stream that memgrad's kernels and copies on `device` use (-1: the current device).
Stream current_stream(int device = -1);
void set_current_stream(const Stream& s);
// Makes `s` current for its device until the guard dies.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

// A marker in a stream: wait on it from the host or from another stream, or time between two.
class Event {
 public:
  explicit Event(bool timing = false);
  void record(const Stream& s = current_stream());
  void synchronize() const;
  bool query() const;
  void wait(const Stream& s) const;          // `s` waits for this event
  float elapsed_ms(const Event& end) const;  // both recorded with timing
  void* handle() const { return handle_.get(); }

 private:
  std::shared_ptr<void> handle_;
  [[maybe_unused]] int device_ = 0;  // read only by the CUDA build (core/cuda/runtime.cu)
};

// Bytes of page-locked host memory held now (empty_pinned, pin_memory and parameter offload's
// host memory: core/cuda.h, core/host_memory.h).
int64_t pinned_bytes();

// Device memory seen by the driver, split into memgrad's reserved bytes and the rest (the CUDA
// context, cuBLAS/cuDNN handles and workspaces, other processes): what nvidia-smi shows beyond
// our allocations.
struct DeviceMemory {
  int64_t total = 0, free = 0, used = 0;
  int64_t memgrad_reserved = 0;  // memory_stats(cuda:N).reserved
  int64_t outside_memgrad = 0;   // used - memgrad_reserved
};
DeviceMemory device_memory(int device = -1);

// float32 matmul on tensor cores with TF32 inputs (float32 accumulation). Off by default.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Kernel variants of the CUDA backend: core/variants.h's registry for DeviceType::CUDA.
std::vector<std::string> kernel_ops();  // ops that have variants
std::vector<std::string> kernel_variants(const std::string& op);
void set_kernel_variant(const std::string& op, const std::string& variant);  // ValueError if unknown
std::string kernel_variant(const std::string& op);

}  // namespace mg::cuda
