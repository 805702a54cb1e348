// Building blocks of the CUDA kernels' host code: device pointers and streams of tensors, library
// handles, and the elementwise map's launch (its kernels are map.cuh's); the device-side pieces
// (load/store, reductions, atomics) are device_common.cuh's.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <memgrad/core/cuda.h>
#include <memgrad/core/dispatch.h>
#include <memgrad/kernels/backend.h>
#include <memgrad/kernels/cuda/device_common.cuh>
#include <memgrad/kernels/cuda/map.cuh>

namespace mg::cuda {

// Raises DeviceError naming `op` when the last launch failed.
void check_launch(const char* op);
// Raises DeviceError saying that `what` failed, unless e is cudaSuccess (and clears the error).
void check_runtime(cudaError_t e, const char* what);
// Makes t's device current and returns its current stream.
cudaStream_t stream_for(const Tensor& t);
// Blocks for a grid-stride loop over `work` items with `threads` per block.
int grid_for(int64_t work, int threads = kThreads);
// Raises IndexError (with `op`'s message) unless every index is in [0, size) or equals `ignore`.
void check_indices(const char* op, const Tensor& index, int64_t size, int64_t ignore = INT64_MIN);

// A library handle (cuBLAS, cuDNN) per device, made by `create(&h)` on first use (on the current
// device: stream_for set it) and kept for the process; its memory shows in
// device_memory().outside_memgrad. A handle serves one host thread at a time: callers hold `mu` from
// setting its stream to the last call that enqueues work.
template <class H>
struct LibraryHandle {
  std::mutex mu;
  H h = nullptr;
};
template <class H, class Create>
LibraryHandle<H>& library_handle(int device, Create create) {
  static std::mutex mu;
  static auto* handles = new std::vector<std::unique_ptr<LibraryHandle<H>>>();  // never destroyed (exit order)
  std::lock_guard<std::mutex> g(mu);
  if (handles->size() <= size_t(device)) handles->resize(size_t(device) + 1);
  auto& slot = (*handles)[size_t(device)];
  if (!slot) {
    auto made = std::make_unique<LibraryHandle<H>>();
    create(&made->h);
    slot = std::move(made);
  }
  return *slot;
}

template <class T>
T* dptr(const Tensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.storage()->data()) + t.storage_offset() * int64_t(t.element_size()));
}
template <class T>
T* dptr_or_null(const Tensor& t) {
  return t.defined() ? dptr<T>(t) : nullptr;
}

inline bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Elementwise map for inputs already expanded to out's shape (any strides).
template <class Out, class... In, class F>
void map(const char* op, const Tensor& out, F f, const Each<In, Tensor>&... in) {
  const int64_t n = out.numel();
  if (n == 0) return;
  constexpr int N = 1 + sizeof...(In);
  cudaStream_t s = stream_for(out);
  Iter<N> it = make_iter<N>(op, out.shape(), {&out.strides(), &in.strides()...});
  Out* o = dptr<Out>(out);
  if (it.contiguous) {
    constexpr size_t widest = std::max({sizeof(Out), sizeof(In)...});
    constexpr int V = int(16 / widest) > 0 ? int(16 / widest) : 1;
    bool vec = V > 1 && aligned(o, V * sizeof(Out)) && (aligned(dptr<In>(in), V * sizeof(In)) && ...);
    if (vec)
      map_contiguous_kernel<V><<<grid_for(n / V + 1), 256, 0, s>>>(n, o, f, dptr<In>(in)...);
    else
      map_contiguous_kernel<1><<<grid_for(n), 256, 0, s>>>(n, o, f, dptr<In>(in)...);
  } else {
    map_strided_kernel<<<grid_for(n), 256, 0, s>>>(it, n, o, f, dptr<In>(in)...);
  }
  check_launch(op);
}

}  // namespace mg::cuda
