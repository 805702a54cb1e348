// The elementwise map's kernels: out[i] = f(load(in[i])...) over N operands of one shape, through a
// strided iterator (dims coalesced like the CPU's for_each_row) or, on contiguous data, 16-byte
// vector loads; grid-stride loops. common.cuh's map() launches them; tests/cuda runs them on the host.
#pragma once
#include <array>
#include <utility>

#include <memgrad/core/error.h>
#include <memgrad/core/shape.h>
#include <memgrad/kernels/cuda/device_common.cuh>

namespace mg::cuda {

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

}  // namespace mg::cuda
