// The kernel interface every device backend fills in. Ops check arguments and allocate outputs;
// kernels only compute. The entries and their contracts are listed once, in kernel_list.h.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <memgrad/core/budget/kernel_call.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/profile.h>
#include <memgrad/core/tensor.h>
#include <memgrad/kernels/adafactor.h>
#include <memgrad/kernels/host_device.h>
#include <memgrad/kernels/pool.h>
#include <memgrad/kernels/quantize8bit.h>
#include <memgrad/kernels/unary.h>
#include <memgrad/kernels/update_rules.h>

namespace mg::kernels {

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Pow, Max, Min, Eq, Ne, Lt, Le, Gt, Ge };
enum class ReduceOp : uint8_t { Sum, Max, Min, LogSumExp };
enum class ScanOp : uint8_t { Sum, Prod };

// An attention mask seen as [batch..., Tq, Tk] through strides (0 where it is broadcast): bool
// (true: the query may see the key) or additive (added to the scaled scores, in the inputs' dtype).
struct AttentionMask {
  enum class Kind : uint8_t { None, Bool, Additive };
  static constexpr int kMaxDims = 6;  // batch dims of size > 1
  Kind kind = Kind::None;
  int nd = 0;
  int64_t size[kMaxDims] = {}, stride[kMaxDims] = {};
  int64_t stride_q = 0, stride_k = 0;
  // Element (i, j) of head bh (bh counts the batch dims row-major).
  MG_HD int64_t offset(int64_t bh, int64_t i, int64_t j) const { return head_offset(bh) + i * stride_q + j * stride_k; }
  // Element (0, 0) of head bh: its divisions are worth computing once per head, not per score. The
  // fixed trip count unrolls on the GPU (an index known only at run time copies the arrays to local memory).
  MG_HD int64_t head_offset(int64_t bh) const {
    int64_t off = 0;
    for (int d = kMaxDims - 1; d >= 0; --d)
      if (d < nd) {
        off += bh % size[d] * stride[d];
        bh /= size[d];
      }
    return off;
  }
};

// Scaled dot-product attention: softmax(scale * q k^T + mask) -> dropout -> @ v, with no [Tq, Tk]
// matrix kept. Query i sees keys j <= i when causal (PyTorch's is_causal), and those the mask lets
// through. Dropout keeps probability (bh, i, j) when draw offset + (bh * Tq + i) * Tk + j is >= p,
// the same mask the dropout op draws on the contiguous [BH, Tq, Tk] probabilities.
struct AttentionParams {
  double scale = 1;
  bool causal = false;
  double dropout_p = 0;
  uint64_t seed = 0, offset = 0;
  AttentionMask mask;
};

// A tensor argument the kernel writes (an output, a gradient, an in-place destination). It is the
// Tensor itself, which the kernel uses as one; ops pass plain Tensors. The type is what tells
// kernels::run, and through it the budget runtime, which storages a run makes.
struct Out : Tensor {
  Out(const Tensor& t) : Tensor(t) {}  // implicit: ops pass the Tensors they allocated
};

// Operands of a multi-tensor op: lists[k][j] is operand k of tensor j.
using TensorLists = std::vector<std::vector<Tensor>>;

// A contiguous shape seen as [outer, size along dim, inner] (the layout of the index kernels).
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
inline DimSplit split_at(const Shape& s, int64_t dim) {
  DimSplit r;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) (d < dim ? r.outer : d == dim ? r.size : r.inner) *= s[d];
  return r;
}

// One function pointer per kernel of kernel_list.h, null where the backend has none.
struct Backend {
#define MG_KERNEL(name, ret, ...) ret (*name)(__VA_ARGS__) = nullptr;
#include <memgrad/kernels/kernel_list.h>
};

const Backend& cpu_backend();
const Backend& cuda_backend();  // all null when memgrad is built without CUDA
// A kernel's scratch is part of its op's contract. These tables hold, for the kernels of MG_SCRATCH,
// their backend's scratch function (which allocates what the kernel does and computes nothing); the
// other entries are null. A meta run calls the table of meta_target() (core/device.h), so a plan books
// the Workspace bytes of the device it is made for. cuda_scratch is built without nvcc too.
const Backend& cpu_scratch();
const Backend& cuda_scratch();
const Backend& scratch_backend(DeviceType target);

// The scratch function of a kernel of type F (kernel_list.h's MG_SCRATCH): the kernel's parameters,
// returning what the kernel computes on. Backends declare theirs as `ScratchOf<decltype(name)> name_scratch;`.
template <class F>
struct ScratchFn;
template <class R, class... P>
struct ScratchFn<R(P...)> {
  using type = std::vector<Tensor>(P...);
};
template <class F>
using ScratchOf = typename ScratchFn<F>::type;
// A Backend entry that runs scratch function F and drops what it returns (a scratch table's entry).
template <auto F>
struct ScratchOnly;
template <class... P, std::vector<Tensor> (*F)(P...)>
struct ScratchOnly<F> {
  static void run(P... p) { F(p...); }
};

// Which parameters of a kernel of type R(P...) it writes: its `const Out&` ones.
template <class R, class... P>
constexpr std::array<bool, sizeof...(P)> written_params(R (*)(P...)) {
  return {std::is_same_v<P, const Out&>...};
}
// The FLOPs of a call of `fn` with `args`, as kernel_list.h's MG_FLOPS says (0 for the others).
template <class Fn, class... Args>
double kernel_flops(Fn Backend::*fn, const Args&... args) {
#define MG_KERNEL(name, ...)
#define MG_FLOPS(name, f)                                    \
  if constexpr (std::is_same_v<Fn, decltype(Backend::name)>) \
    if (fn == &Backend::name) return f(args...);
#include <memgrad/kernels/kernel_list.h>
  return 0;
}
// The names of the required (non-optional) entries `b` lacks: empty for a complete backend.
std::vector<std::string> missing_kernels(const Backend& b);

// The name of Backend entry `fn`, as kernel_list.h spells it (for messages).
template <class Fn>
const char* kernel_name(Fn Backend::*fn) {
#define MG_KERNEL(name, ...)                                 \
  if constexpr (std::is_same_v<Fn, decltype(Backend::name)>) \
    if (fn == &Backend::name) return #name;
#include <memgrad/kernels/kernel_list.h>
  return "?";
}
// Raises NotImplementedError: `device`'s backend has no kernel `kernel` (for the current op).
[[noreturn]] void no_kernel(const Device& device, const char* kernel);

// A kernel that does nothing, for a meta run of one without scratch.
template <class Fn>
struct NoKernel;
template <class R, class... P>
struct NoKernel<R (*)(P...)> {
  static R call(P...) { return R(); }
};

// Runs `fn` of the backend for `device`; on meta, only the scratch the kernel of meta_target() would
// allocate. Raises NotImplementedError naming the current op (OpScope) and the kernel when the
// backend lacks it. Under a memory budget (core/budget/budget.h) the run goes through the budget
// runtime, which records how to recompute what it writes (its Out parameters) at what cost (its
// MG_FLOPS). Under a KernelProfile (core/profile.h) the call is timed.
template <class Fn, class... Args>
void run(const Device& device, Fn Backend::*fn, Args&&... args) {
  NoGradGuard no_grad;                       // kernels never record history
  MemoryScope scratch(Category::Workspace);  // anything a kernel allocates is scratch
  if (device.is_meta()) {
    auto f = scratch_backend(meta_target()).*fn;
    // Under a budget on meta the run is recorded as on a device (its scratch is what a replay makes).
    if (budget::detail::any_active() && budget::detail::active(device))
      return budget::detail::run_kernel(device, kernel_name(fn), f ? f : &NoKernel<Fn>::call, written_params(f),
                                        kernel_flops(fn, args...), args...);
    if (f) f(std::forward<Args>(args)...);
    return;
  }
  auto f = (device.is_cuda() ? cuda_backend() : cpu_backend()).*fn;
  if (f == nullptr) no_kernel(device, kernel_name(fn));
  auto call = [&] {
    if (budget::detail::any_active())
      return budget::detail::run_kernel(device, kernel_name(fn), f, written_params(f), kernel_flops(fn, args...),
                                        args...);
    f(std::forward<Args>(args)...);
  };
  if (!mg::detail::any_kernel_profile()) return call();
  mg::detail::KernelSpan span(device, kernel_name(fn));
  call();
  span.stop();
}

// Runs an optional entry (one returning bool, such as conv2d): false when the backend has none,
// declines, or `device` is meta, and the caller takes its general path.
template <class Fn, class... Args>
bool try_run(const Device& device, Fn Backend::*fn, Args&&... args) {
  if (device.is_meta()) return false;
  NoGradGuard no_grad;
  MemoryScope scratch(Category::Workspace);
  auto f = (device.is_cuda() ? cuda_backend() : cpu_backend()).*fn;
  if (f == nullptr) return false;
  if (!mg::detail::any_kernel_profile()) return f(std::forward<Args>(args)...);
  mg::detail::KernelSpan span(device, kernel_name(fn));
  const bool ran = f(std::forward<Args>(args)...);
  if (ran) span.stop();
  return ran;
}

}  // namespace mg::kernels
