// Building blocks of the CUDA kernels: device pointers and streams of tensors, library handles, an
// N-operand strided iterator (dims coalesced like the CPU's for_each_row) and the elementwise map
// (16-byte vector loads on contiguous data, grid-stride loops) and atomic adds for every dtype; the
// device-side pieces (load/store, reductions) are device_common.cuh's.
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

namespace mg::cuda {

// Raises DeviceError naming `op` when the last launch failed.
void check_launch(const char* op);
// Raises DeviceError saying that `what` failed, unless e is cudaSuccess (and clears the error).
void check_runtime(cudaError_t e, const char* what);
// Makes t's device current and returns its current stream.
cudaStream_t stream_for(const Tensor& t);
// Threads per block of most kernels (the row kernels: a block per row).
constexpr int kThreads = 256;
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

// ---- strided iteration over N operands of one shape (operand 0 is the output)
inline constexpr int kMaxDims = 12;
template <int N>
struct Iter {
  int nd = 0;
  bool contiguous = true;  // one dim of stride 1 in every operand
  int64_t size[kMaxDims];
  int64_t stride[kMaxDims][N];
  __device__ __forceinline__ void offsets(int64_t i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = nd - 1; d >= 0; --d) {
      int64_t c = i % size[d];
      i /= size[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += c * stride[d][k];
    }
  }
};
template <int N>
Iter<N> make_iter(const char* op, const Shape& shape, const std::array<const Strides*, N>& st) {
  Iter<N> it;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = it.nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = it.stride[it.nd - 1][k] == (*st[k])[d] * shape[d];
    if (merge) {
      it.size[it.nd - 1] *= shape[d];
      for (int k = 0; k < N; ++k) it.stride[it.nd - 1][k] = (*st[k])[d];
      continue;
    }
    MG_CHECK(it.nd < kMaxDims, NotImplementedError, op, ": the cuda backend handles at most ", kMaxDims,
             " non-mergeable dims, got shape ", shape_str(shape));
    it.size[it.nd] = shape[d];
    for (int k = 0; k < N; ++k) it.stride[it.nd][k] = (*st[k])[d];
    ++it.nd;
  }
  for (int k = 0; k < N && it.nd > 0; ++k) it.contiguous &= it.nd == 1 && it.stride[0][k] == 1;
  return it;
}

// ---- elementwise map: out[i] = f(load(in[i])...)
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

namespace impl {
template <class Out, class F, class... In, size_t... I>
__device__ __forceinline__ void map_at(Out* o, const int64_t* off, const F& f, std::index_sequence<I...>,
                                       const In*... in) {
  o[off[0]] = dstore<Out>(f(dload(in[off[I + 1]])...));
}
template <int V, class Out, class F, class... In>
__device__ __forceinline__ void map_vec(Vec<Out, V>& o, const F& f, const Vec<In, V>&... v) {
#pragma unroll
  for (int k = 0; k < V; ++k) o.v[k] = dstore<Out>(f(dload(v.v[k])...));
}
}  // namespace impl

template <class Out, class F, class... In>
__global__ void map_strided_kernel(Iter<1 + sizeof...(In)> it, int64_t n, Out* out, F f, const In*... in) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1 + sizeof...(In)];
    it.offsets(i, off);
    impl::map_at(out, off, f, std::index_sequence_for<In...>{}, in...);
  }
}

template <int V, class Out, class F, class... In>
__global__ void map_contiguous_kernel(int64_t n, Out* out, F f, const In*... in) {
  const int64_t start = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  const int64_t nv = n / V;
  for (int64_t i = start; i < nv; i += step) {
    Vec<Out, V> o;
    impl::map_vec<V>(o, f, reinterpret_cast<const Vec<In, V>*>(in)[i]...);
    reinterpret_cast<Vec<Out, V>*>(out)[i] = o;
  }
  for (int64_t i = nv * V + start; i < n; i += step) out[i] = dstore<Out>(f(dload(in[i])...));
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

// ---- atomic add for every dtype (8-bit integers through compare-and-swap on their 32-bit word)
template <class T>
__device__ __forceinline__ void atomic_add(T* p, opmath_t<T> v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t>) {
    atomicAdd(p, v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, Half>) {
    atomicAdd(reinterpret_cast<__half*>(p), __float2half_rn(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __float2bfloat16_rn(v));
  } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {  // wraps, as the CPU's add
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
    const unsigned int shift = 8u * unsigned(a & 3), add = unsigned(v) & 0xffu;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      const unsigned int byte = ((assumed >> shift) + add) & 0xffu;
      old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
    } while (old != assumed);
  } else {  // bool: x + v != 0 is a logical or
    if (!v) return;
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
    atomicOr(word, 1u << (8 * (a & 3)));
  }
}

}  // namespace mg::cuda
