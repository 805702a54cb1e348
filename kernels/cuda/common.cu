// Launch helpers shared by the CUDA kernel files.
#include <mutex>
#include <vector>

#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

void check_launch(const char* op) {
  cudaError_t e = cudaGetLastError();
  MG_CHECK(e == cudaSuccess, DeviceError, op, ": cuda kernel launch failed: ", cudaGetErrorString(e));
}

cudaStream_t stream_for(const Tensor& t) {
  int d = t.device().index, cur = -1;
  cudaGetDevice(&cur);
  if (cur != d) {
    cudaError_t e = cudaSetDevice(d);
    MG_CHECK(e == cudaSuccess, DeviceError, "cuda: cudaSetDevice(", d, ") failed: ", cudaGetErrorString(e));
  }
  return static_cast<cudaStream_t>(current_stream(d).handle());
}

int grid_for(int64_t work, int threads) {
  int64_t blocks = (work + threads - 1) / threads;
  return int(std::clamp<int64_t>(blocks, 1, 65536));  // grid-stride loops cover the rest
}

namespace {
// Records the smallest position whose index is out of range.
__global__ void bad_index_kernel(const int64_t* idx, int64_t n, int64_t size, int64_t ignore,
                                 unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t v = idx[i];
    if (v != ignore && (v < 0 || v >= size)) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}
}  // namespace

// An 8-byte device flag per device for index checks. It lives outside the ledger (like the cuBLAS
// handle), so checks leave the ledger's numbers equal to the CPU's.
static unsigned long long* index_flag(int device) {
  static std::mutex mu;
  static std::vector<unsigned long long*> flags;
  std::lock_guard<std::mutex> g(mu);
  if (flags.size() <= size_t(device)) flags.resize(size_t(device) + 1, nullptr);
  if (!flags[size_t(device)]) {
    cudaError_t e = cudaMalloc(&flags[size_t(device)], sizeof(unsigned long long));
    MG_CHECK(e == cudaSuccess, DeviceError, "cuda: cudaMalloc of the index-check flag failed: ", cudaGetErrorString(e));
  }
  return flags[size_t(device)];
}

void check_indices(const char* op, const Tensor& index, int64_t size, int64_t ignore) {
  const int64_t n = index.numel();
  if (n == 0) return;
  cudaStream_t s = stream_for(index);
  unsigned long long none = ~0ull, bad = 0;
  unsigned long long* fp = index_flag(index.device().index);
  cudaMemcpyAsync(fp, &none, sizeof none, cudaMemcpyHostToDevice, s);
  const int64_t* ip = dptr<int64_t>(index);
  bad_index_kernel<<<grid_for(n), 256, 0, s>>>(ip, n, size, ignore, fp);
  check_launch(op);
  cudaMemcpyAsync(&bad, fp, sizeof bad, cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);  // the error must reach the caller before the op returns
  if (bad == none) return;
  int64_t value = 0;
  cudaMemcpyAsync(&value, ip + bad, sizeof value, cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  if (ignore != INT64_MIN)
    throw IndexError(detail::str(op, ": expected target values in [0, ", size, ") or ignore_index ", ignore, ", got ",
                                 value, " at position ", bad));
  throw IndexError(detail::str(op, ": expected indices in [0, ", size, "), got ", value, " at position ", bad));
}

}  // namespace mg::cuda
