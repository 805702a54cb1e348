// Multi-tensor ops: an optimizer step (or the loss scaler's unscale + inf/NaN check) over many
// tensors in one launch per batch, as PyTorch's fused/_foreach kernels and llm.c's AdamW kernel.
// The batches and the kernel are multi_tensor.cuh's. The SGD and Adam steps also take half gradients
// of float32 parameters (apex's FusedAdam's mixed dtypes): no float32 gradient copies.
#include <vector>

#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>
#include <memgrad/kernels/cuda/multi_tensor.cuh>

namespace mg::cuda {

namespace {

using namespace multi_tensor_kernels;

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

// Whether tensor j's gradient (operand 1) is half while its parameter is float32: the mixed-precision
// step, which for_each_mixed launches.
bool mixed(const TensorLists& lists, size_t j) {
  return lists.size() > 1 && lists[1][j].defined() && lists[1][j].dtype() != lists[0][j].dtype();
}

// Runs launch<T> once per floating dtype present among the tensors lists[0] (the mixed ones aside).
template <int D, class S, class F>
void for_each_dtype(const char* op, const TensorLists& lists, const std::vector<S>& scalars, const F& f) {
  for (const Tensor& x : lists[0])
    MG_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected floating tensors, got dtype ", x.dtype());
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    std::vector<size_t> which;
    for (size_t j = 0; j < lists[0].size(); ++j)
      if (lists[0][j].dtype() == t && !mixed(lists, j)) which.push_back(j);
    if (which.empty()) continue;
    dispatch_floating(t, op, [&](auto tag) { launch<typename decltype(tag)::type, D>(op, lists, which, scalars, f); });
  }
}

// Runs launch<float> once per half gradient dtype among the mixed tensors, with make(Tag<G>{}) for
// gradients of type G (their pointers travel as float*, the functor reads them as G).
template <int D, class S, class Make>
void for_each_mixed(const char* op, const TensorLists& lists, const std::vector<S>& scalars, const Make& make) {
  for (DType g : {kFloat16, kBFloat16}) {
    std::vector<size_t> which;
    for (size_t j = 0; j < lists[0].size(); ++j)
      if (mixed(lists, j)) {
        MG_CHECK(lists[0][j].dtype() == kFloat32 && is_half(lists[1][j].dtype()), DTypeError, op,
                 ": expected a gradient of the parameter's dtype, or a half gradient of a float32 parameter, got ",
                 lists[0][j].dtype(), " and ", lists[1][j].dtype());
        if (lists[1][j].dtype() == g) which.push_back(j);
      }
    if (which.empty()) continue;
    auto go = [&](auto tag) { launch<float, D>(op, lists, which, scalars, make(tag)); };
    g == kFloat16 ? go(Tag<Half>{}) : go(Tag<BFloat16>{});
  }
}

}  // namespace

void sgd_update(const TensorLists& lists, const std::vector<rules::SGDScalars>& scalars) {
  if (lists.empty() || lists[0].empty()) return;
  for_each_dtype<3>("SGD", lists, scalars, SGDElement{});
  for_each_mixed<3>("SGD", lists, scalars, [](auto tag) { return SGDMixedElement<typename decltype(tag)::type>{}; });
}

void adam_update(const TensorLists& lists, const std::vector<rules::AdamScalars>& scalars) {
  if (lists.empty() || lists[0].empty()) return;
  for_each_dtype<5>("Adam", lists, scalars, AdamElement{});
  for_each_mixed<5>("Adam", lists, scalars, [](auto tag) { return AdamMixedElement<typename decltype(tag)::type>{}; });
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
