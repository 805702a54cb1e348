// Multi-tensor ops: an optimizer step (or the loss scaler's unscale + inf/NaN check) over many
// tensors in one launch per batch, as PyTorch's fused/_foreach kernels and llm.c's AdamW kernel.
// A batch travels in the kernel arguments: operand pointers, sizes, cumulative chunk counts and
// per-tensor scalars of up to Batch::kMax tensors of one dtype. Each block walks chunks of kChunk
// elements across the batch, so one launch covers tensors of any mix of sizes; the batch is a
// __grid_constant__ argument, read in place rather than copied per thread. The element math is
// kernels/update_rules.h, the same functions the CPU backend calls.
#include <vector>

#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>

namespace mg::cuda {

namespace {

constexpr int64_t kChunk = 16384;   // elements a block updates before moving to its next chunk
constexpr int kMaxBlocks = 1024;    // blocks stride over the chunks beyond this
constexpr size_t kArgBytes = 3840;  // batch + functor stay under the classic 4 KiB of kernel arguments

struct NoScalars {};

template <class T, int D, class S>
struct Batch {
  static constexpr int kMax = int((kArgBytes - 64) / (D * sizeof(T*) + 2 * sizeof(int64_t) + sizeof(S)));
  T* ptr[D][kMax];          // operand k of tensor j (null: an optional operand not used)
  int64_t numel[kMax];      // elements of tensor j
  int64_t chunk_end[kMax];  // chunks of tensors 0..j
  S scalars[kMax];
  int n;  // tensors in this batch
};

template <class T, int D, class S, class F>
__global__ void __launch_bounds__(kThreads) multi_tensor_kernel(const __grid_constant__ Batch<T, D, S> b, F f) {
  const int64_t chunks = b.chunk_end[b.n - 1];
  int j = 0;  // a block visits its chunks in increasing order, so j only moves forward
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    while (c >= b.chunk_end[j]) ++j;
    const int64_t first = (c - (j > 0 ? b.chunk_end[j - 1] : 0)) * kChunk;
    const int64_t end = first + kChunk < b.numel[j] ? first + kChunk : b.numel[j];
    for (int64_t i = first + threadIdx.x; i < end; i += blockDim.x) f(b, j, i);
  }
}

// Launches f over tensors `which` of `lists` (all of dtype T), kMax tensors per launch.
template <class T, int D, class S, class F>
void launch(const char* op, const TensorLists& lists, const std::vector<size_t>& which, const std::vector<S>& scalars,
            const F& f) {
  using B = Batch<T, D, S>;
  static_assert(sizeof(B) + sizeof(F) <= 4096, "kernel arguments over 4 KiB");
  cudaStream_t stream = stream_for(lists[0][which.front()]);
  B b;
  b.n = 0;
  auto flush = [&] {
    if (b.n == 0) return;
    const int64_t chunks = b.chunk_end[b.n - 1];
    multi_tensor_kernel<<<int(chunks < kMaxBlocks ? chunks : kMaxBlocks), kThreads, 0, stream>>>(b, f);
    check_launch(op);
    b.n = 0;
  };
  for (size_t j : which) {
    const int64_t n = lists[0][j].numel();
    if (n == 0) continue;
    for (int k = 0; k < D; ++k)
      b.ptr[k][b.n] =
          size_t(k) < lists.size() && lists[size_t(k)][j].defined() ? dptr<T>(lists[size_t(k)][j]) : nullptr;
    b.numel[b.n] = n;
    b.chunk_end[b.n] = (b.n > 0 ? b.chunk_end[b.n - 1] : 0) + (n + kChunk - 1) / kChunk;
    b.scalars[b.n] = scalars.empty() ? S{} : scalars[j];
    if (++b.n == B::kMax) flush();
  }
  flush();
}

// Runs launch<T> once per floating dtype present among the tensors lists[0].
template <int D, class S, class F>
void for_each_dtype(const char* op, const TensorLists& lists, const std::vector<S>& scalars, const F& f) {
  for (const Tensor& x : lists[0])
    MG_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected floating tensors, got dtype ", x.dtype());
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    std::vector<size_t> which;
    for (size_t j = 0; j < lists[0].size(); ++j)
      if (lists[0][j].dtype() == t) which.push_back(j);
    if (which.empty()) continue;
    dispatch_floating(t, op, [&](auto tag) { launch<typename decltype(tag)::type, D>(op, lists, which, scalars, f); });
  }
}

struct SGDElement {
  template <class T>
  __device__ __forceinline__ void operator()(const Batch<T, 3, rules::SGDScalars>& b, int j, int64_t i) const {
    using A = opmath_t<T>;
    T *p = b.ptr[0][j], *buf = b.ptr[2][j];
    A x = dload(p[i]), m = buf ? A(dload(buf[i])) : A(0);
    rules::sgd<A>(x, dload(b.ptr[1][j][i]), m, b.scalars[j]);
    p[i] = dstore<T>(x);
    if (buf) buf[i] = dstore<T>(m);
  }
};

struct AdamElement {
  template <class T>
  __device__ __forceinline__ void operator()(const Batch<T, 5, rules::AdamScalars>& b, int j, int64_t i) const {
    using A = opmath_t<T>;
    T *p = b.ptr[0][j], *m = b.ptr[2][j], *v = b.ptr[3][j], *vmax = b.ptr[4][j];
    A x = dload(p[i]), mi = dload(m[i]), vi = dload(v[i]), wi = vmax ? A(dload(vmax[i])) : A(0);
    rules::adam<A>(x, dload(b.ptr[1][j][i]), mi, vi, wi, b.scalars[j]);
    p[i] = dstore<T>(x), m[i] = dstore<T>(mi), v[i] = dstore<T>(vi);
    if (vmax) vmax[i] = dstore<T>(wi);
  }
};

struct LionElement {
  template <class T>
  __device__ __forceinline__ void operator()(const Batch<T, 3, rules::LionScalars>& b, int j, int64_t i) const {
    using A = opmath_t<T>;
    T *p = b.ptr[0][j], *m = b.ptr[2][j];
    A x = dload(p[i]), mi = dload(m[i]);
    rules::lion<A>(x, dload(b.ptr[1][j][i]), mi, rules::LionCoeffs<A>(b.scalars[j]));
    p[i] = dstore<T>(x), m[i] = dstore<T>(mi);
  }
};

struct UnscaleElement {
  float* found_inf;
  double inv_scale;
  bool scale;
  template <class T>
  __device__ __forceinline__ void operator()(const Batch<T, 1, NoScalars>& b, int j, int64_t i) const {
    using A = opmath_t<T>;
    T* p = b.ptr[0][j];
    A v = dload(p[i]);
    if (!isfinite(v)) *found_inf = 1.0f;  // every writer writes the same value
    if (scale) p[i] = dstore<T>(v * A(inv_scale));
  }
};

}  // namespace

void sgd_update(const TensorLists& lists, const std::vector<rules::SGDScalars>& scalars) {
  if (lists.empty() || lists[0].empty()) return;
  for_each_dtype<3>("SGD", lists, scalars, SGDElement{});
}

void adam_update(const TensorLists& lists, const std::vector<rules::AdamScalars>& scalars) {
  if (lists.empty() || lists[0].empty()) return;
  for_each_dtype<5>("Adam", lists, scalars, AdamElement{});
}

void lion_update(const TensorLists& lists, const std::vector<rules::LionScalars>& scalars) {
  if (lists.empty() || lists[0].empty()) return;
  for_each_dtype<3>("Lion", lists, scalars, LionElement{});
}

void non_finite_check_and_unscale(const std::vector<Tensor>& tensors, const Out& found_inf, double inv_scale) {
  if (tensors.empty()) return;
  UnscaleElement f{dptr<float>(found_inf), inv_scale, inv_scale != 1.0};
  for_each_dtype<1>("non_finite_check_and_unscale", TensorLists{tensors}, std::vector<NoScalars>{}, f);
}

}  // namespace mg::cuda
