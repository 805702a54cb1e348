// Launch helpers shared by the CUDA kernel files.
#include <mutex>
#include <vector>

#include <memgrad/kernels/cuda/check_indices.cuh>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

void check_launch(const char* op) {
  cudaError_t e = cudaGetLastError();
  MG_CHECK(e == cudaSuccess, DeviceError, op, ": cuda kernel launch failed: ", cudaGetErrorString(e));
}

cudaStream_t stream_for(const Tensor& t) {
  int d = t.device().index, cur = -1;
  check_runtime(cudaGetDevice(&cur), "cudaGetDevice");
  if (cur != d) check_runtime(cudaSetDevice(d), detail::str("cudaSetDevice(", d, ")").c_str());
  return static_cast<cudaStream_t>(current_stream(d).handle());
}

void check_runtime(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw DeviceError(detail::str("cuda: ", what, " failed: ", cudaGetErrorString(e)));
}

int grid_for(int64_t work, int threads) {
  int64_t blocks = (work + threads - 1) / threads;
  return int(std::clamp<int64_t>(blocks, 1, 65536));  // grid-stride loops cover the rest
}

// 8-byte device flags for index checks, lent to one check at a time (checks on several threads and
// streams never share one) and kept for the process. They live outside the ledger (like the cuBLAS
// handle), so checks leave the ledger's numbers equal to the CPU's.
class IndexFlag {
 public:
  explicit IndexFlag(int device) : device_(device) {
    std::lock_guard<std::mutex> g(mu());
    auto& free = pool();
    if (free.size() > size_t(device) && !free[size_t(device)].empty()) {
      flag_ = free[size_t(device)].back();
      free[size_t(device)].pop_back();
      return;
    }
    check_runtime(cudaMalloc(&flag_, sizeof *flag_), "cudaMalloc of an index-check flag");
  }
  ~IndexFlag() {
    std::lock_guard<std::mutex> g(mu());
    auto& free = pool();
    if (free.size() <= size_t(device_)) free.resize(size_t(device_) + 1);
    free[size_t(device_)].push_back(flag_);
  }
  IndexFlag(const IndexFlag&) = delete;
  IndexFlag& operator=(const IndexFlag&) = delete;
  unsigned long long* get() const { return flag_; }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::vector<unsigned long long*>>& pool() {           // free flags per device
    static auto* p = new std::vector<std::vector<unsigned long long*>>();  // never destroyed (exit order)
    return *p;
  }
  int device_;
  unsigned long long* flag_ = nullptr;
};

void check_indices(const char* op, const Tensor& index, int64_t size, int64_t ignore) {
  const int64_t n = index.numel();
  if (n == 0) return;
  cudaStream_t s = stream_for(index);
  const unsigned long long none = ~0ull;
  unsigned long long bad = none;  // every failure below raises DeviceError before `bad` is read
  IndexFlag flag(index.device().index);
  check_runtime(cudaMemcpyAsync(flag.get(), &none, sizeof none, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  const int64_t* ip = dptr<int64_t>(index);
  index_kernels::bad_index_kernel<<<grid_for(n), 256, 0, s>>>(ip, n, size, ignore, flag.get());
  check_launch(op);
  check_runtime(cudaMemcpyAsync(&bad, flag.get(), sizeof bad, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  check_runtime(cudaStreamSynchronize(s), "cudaStreamSynchronize");  // the error must reach the caller now
  if (bad == none) return;
  int64_t value = 0;
  check_runtime(cudaMemcpyAsync(&value, ip + bad, sizeof value, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  check_runtime(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  if (ignore != INT64_MIN)
    throw IndexError(detail::str(op, ": expected target values in [0, ", size, ") or ignore_index ", ignore, ", got ",
                                 value, " at position ", bad));
  throw IndexError(detail::str(op, ": expected indices in [0, ", size, "), got ", value, " at position ", bad));
}

}  // namespace mg::cuda
