// conv2d through cuDNN's legacy convolution API (cudnnConvolutionForward, BackwardData,
// BackwardFilter): the Backend's optional direct-convolution entries. Algorithms come from cuDNN's
// heuristics (cudnnGet*Algorithm_v7: no benchmarking, nothing cached per shape), in its order of
// preference; the first one whose workspace can be allocated runs. The workspace is a memgrad
// allocation, so it is booked as Workspace under the op's owner label and then returned to the
// caching allocator. Kernel variant "im2col", dtypes other than float32/float16/bfloat16, empty
// tensors, sizes past cuDNN's 32-bit ones and configurations no algorithm supports decline
// (return false), and the op lowers to im2col + GEMM. Built without cuDNN (-DMG_CUDNN=OFF) the
// entries always decline and "im2col" is conv2d's only variant.
#include <memgrad/core/variants_impl.h>
#include <memgrad/kernels/cuda/cuda_kernels.h>
#include <memgrad/kernels/cuda/common.cuh>

#ifdef MG_WITH_CUDNN
#include <cudnn.h>
#if CUDNN_MAJOR < 8
#error "memgrad's conv2d needs cuDNN 8 or later (bfloat16, CUDNN_FMA_MATH); configure with -DMG_CUDNN=OFF"
#endif

#include <climits>
#include <memory>
#include <mutex>
#include <vector>

#include <memgrad/core/memory.h>
#include <memgrad/core/storage.h>
#endif

namespace mg::cuda {

namespace {
enum class Conv2d { Cudnn, Im2col };
}  // namespace

#ifdef MG_WITH_CUDNN

namespace {

const KernelVariant<Conv2d> kConv2d(DeviceType::CUDA, "conv2d", {{Conv2d::Cudnn, "cudnn"}, {Conv2d::Im2col, "im2col"}});

[[noreturn]] void fail(cudnnStatus_t s, const char* op, const char* what) {
  std::string extra;
#if CUDNN_MAJOR >= 9
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  if (last[0]) extra = detail::str(" (", last, ")");
#endif
  throw DeviceError(detail::str(op, ": ", what, " failed: ", cudnnGetErrorString(s), extra));
}
void check(cudnnStatus_t s, const char* op, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) fail(s, op, what);
}
// A status saying that this algorithm cannot take this configuration (try the next one), rather
// than a failure. Other bad-parameter statuses (null pointer, workspace too small, shape or
// stream mismatch) are memgrad bugs and raise, instead of hiding behind the im2col fallback.
bool unsupported(cudnnStatus_t s) {
#if CUDNN_MAJOR >= 9
  return CUDNN_STATUS_CATEGORY(int(s)) == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
#else
  return s == CUDNN_STATUS_NOT_SUPPORTED;
#endif
}
// check() for the describing and heuristic calls: false (decline) when cuDNN does not support
// the configuration at all, e.g. bfloat16 on a GPU before Ampere.
bool supported(cudnnStatus_t s, const char* op, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS && !unsupported(s)) fail(s, op, what);
  return s == CUDNN_STATUS_SUCCESS;
}

using Handle = LibraryHandle<cudnnHandle_t>;
Handle& handle(int device) {
  return library_handle<cudnnHandle_t>(device,
                                       [](cudnnHandle_t* h) { check(cudnnCreate(h), "conv2d", "cudnnCreate"); });
}

template <class T, cudnnStatus_t (*Destroy)(T)>
struct Descriptor {
  T d = nullptr;
  Descriptor() = default;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (d) Destroy(d);
  }
};

// The descriptors of one convolution: x [N, C, H, W], w [O, C/groups, kh, kw], y [N, O, oh, ow]
// (y stands for out in forward and for grad_out in backward), all contiguous NCHW.
struct Conv {
  explicit Conv(const char* name) : op(name) {}
  const char* op;  // for error messages
  Descriptor<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor> x, y;
  Descriptor<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor> w;
  Descriptor<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor> conv;
  bool exact_fp32 = false;  // float32 without TF32: FMA kernels only
};

bool fits_int(const Tensor& t) {
  if (t.numel() == 0 || t.numel() > INT_MAX) return false;
  for (int64_t s : t.shape())
    if (s > INT_MAX) return false;
  return true;
}

// Fills `c`; false when cuDNN is not to be used for this call (see the top of the file).
bool describe(Conv& c, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dGeometry& g, int64_t groups) {
  if (kConv2d != Conv2d::Cudnn) return false;
  const DType t = x.dtype();
  if (t != kFloat32 && t != kFloat16 && t != kBFloat16) return false;
  if (w.dtype() != t || y.dtype() != t) return false;  // e.g. a gradient hook that changed the dtype
  if (!fits_int(x) || !fits_int(w) || !fits_int(y)) return false;
  for (int64_t v : {g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, groups})
    if (v > INT_MAX) return false;
  const cudnnDataType_t data = t == kFloat16    ? CUDNN_DATA_HALF
                               : t == kBFloat16 ? CUDNN_DATA_BFLOAT16
                                                : CUDNN_DATA_FLOAT;
  // float32 uses TF32 tensor cores only when allowed (cuDNN's default math would use them);
  // 16-bit data uses tensor cores, accumulating in float32 like the cpu.
  c.exact_fp32 = t == kFloat32 && !allow_tf32();
  const cudnnMathType_t math = t != kFloat32  ? CUDNN_TENSOR_OP_MATH
                               : c.exact_fp32 ? CUDNN_FMA_MATH
                                              : CUDNN_DEFAULT_MATH;
  const char* op = c.op;
  check(cudnnCreateTensorDescriptor(&c.x.d), op, "cudnnCreateTensorDescriptor");
  check(cudnnCreateTensorDescriptor(&c.y.d), op, "cudnnCreateTensorDescriptor");
  check(cudnnCreateFilterDescriptor(&c.w.d), op, "cudnnCreateFilterDescriptor");
  check(cudnnCreateConvolutionDescriptor(&c.conv.d), op, "cudnnCreateConvolutionDescriptor");
  const bool described =
      supported(cudnnSetTensor4dDescriptor(c.x.d, CUDNN_TENSOR_NCHW, data, int(x.size(0)), int(x.size(1)),
                                           int(x.size(2)), int(x.size(3))),
                op, "cudnnSetTensor4dDescriptor (input)") &&
      supported(cudnnSetTensor4dDescriptor(c.y.d, CUDNN_TENSOR_NCHW, data, int(y.size(0)), int(y.size(1)),
                                           int(y.size(2)), int(y.size(3))),
                op, "cudnnSetTensor4dDescriptor (output)") &&
      supported(cudnnSetFilter4dDescriptor(c.w.d, data, CUDNN_TENSOR_NCHW, int(w.size(0)), int(w.size(1)),
                                           int(w.size(2)), int(w.size(3))),
                op, "cudnnSetFilter4dDescriptor") &&
      supported(cudnnSetConvolution2dDescriptor(c.conv.d, int(g.ph), int(g.pw), int(g.sh), int(g.sw), int(g.dh),
                                                int(g.dw), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                op, "cudnnSetConvolution2dDescriptor") &&
      supported(cudnnSetConvolutionGroupCount(c.conv.d, int(groups)), op, "cudnnSetConvolutionGroupCount") &&
      supported(cudnnSetConvolutionMathType(c.conv.d, math), op, "cudnnSetConvolutionMathType");
  if (!described) return false;
  int n = 0, o = 0, oh = 0, ow = 0;
  check(cudnnGetConvolution2dForwardOutputDim(c.conv.d, c.x.d, c.w.d, &n, &o, &oh, &ow), op,
        "cudnnGetConvolution2dForwardOutputDim");
  MG_CHECK(n == y.size(0) && o == y.size(1) && oh == y.size(2) && ow == y.size(3), DeviceError, op,
           ": cuDNN computes an output of [", n, ", ", o, ", ", oh, ", ", ow, "], expected ", shape_str(y.shape()));
  return true;
}

// Whether a workspace of `bytes` can be had under the memory limit of `d` (set_memory_limit)
// without the allocator's last resort: from a cached block, or from a segment of its own size
// that fits under the limit. One past that is skipped, not tried: the attempt would empty the
// cache and be counted and recorded as an out-of-memory event although the op then succeeds with
// a smaller workspace. Without a limit, a device that is really full is found by trying.
bool within_limit(const Device& d, size_t bytes) {
  if (bytes >= (size_t(1) << 40)) return false;  // cuDNN has answered absurd sizes
  const MemoryStats s = memory_stats(d);
  const int64_t rounded = int64_t(memory::round_size(bytes));
  return s.limit == 0 ||
         (s.allocated + rounded <= s.limit && (s.largest_free_block >= rounded || s.reserved + rounded <= s.limit));
}

// Runs the first algorithm of cuDNN's heuristic list that supports the configuration and whose
// workspace can be allocated, on the current stream of `written`'s device, holding the device's
// handle. List{c, handle}(max, &count, perf) queries the heuristics, `size(handle, algo, &bytes)`
// the workspace of one algorithm, `launch(handle, algo, workspace, bytes)` enqueues it. False when
// none can.
template <class Perf, class List, class Size, class Launch>
bool run_first_fit(Conv& c, const Tensor& written, const char* what, Size size, Launch launch) {
  const char* op = c.op;
  const Device& device = written.device();
  cudaStream_t stream = stream_for(written);
  Handle& hd = handle(device.index);
  std::lock_guard<std::mutex> lock(hd.mu);
  check(cudnnSetStream(hd.h, stream), op, "cudnnSetStream");
  const List list{c, hd.h};
  int max = 0, count = 0;
  if (!supported(list.max_count(&max), op, what)) return false;
  std::vector<Perf> perf(size_t(std::max(max, 1)));
  if (!supported(list(int(perf.size()), &count, perf.data()), op, what)) return false;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[size_t(i)];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    check(cudnnSetConvolutionMathType(c.conv.d, c.exact_fp32 ? CUDNN_FMA_MATH : p.mathType), op,
          "cudnnSetConvolutionMathType");
    size_t bytes = 0;
    cudnnStatus_t s = size(hd.h, p.algo, &bytes);
    if (s != CUDNN_STATUS_SUCCESS) {
      if (unsupported(s)) continue;
      fail(s, op, "cudnnGetConvolution*WorkspaceSize");
    }
    std::unique_ptr<Storage> workspace;
    if (bytes > 0) {
      if (!within_limit(device, bytes)) continue;
      try {
        workspace = std::make_unique<Storage>(device, bytes, Category::Workspace);
      } catch (const OutOfMemoryError&) {
        continue;  // the device is full: an algorithm with a smaller workspace may still fit
      }
    }
    s = launch(hd.h, p.algo, workspace ? workspace->data() : nullptr, bytes);
    if (s == CUDNN_STATUS_SUCCESS) return true;  // the workspace returns to the cache in stream order
    if (!unsupported(s)) fail(s, op, what);
  }
  return false;
}

// Heuristic queries, with the maximum number of results each can give.
struct FwdList {
  const Conv& c;
  cudnnHandle_t h;
  cudnnStatus_t max_count(int* n) const { return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n); }
  cudnnStatus_t operator()(int max, int* n, cudnnConvolutionFwdAlgoPerf_t* p) const {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, c.x.d, c.w.d, c.conv.d, c.y.d, max, n, p);
  }
};
struct BwdDataList {
  const Conv& c;
  cudnnHandle_t h;
  cudnnStatus_t max_count(int* n) const { return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n); }
  cudnnStatus_t operator()(int max, int* n, cudnnConvolutionBwdDataAlgoPerf_t* p) const {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w.d, c.y.d, c.conv.d, c.x.d, max, n, p);
  }
};
struct BwdFilterList {
  const Conv& c;
  cudnnHandle_t h;
  cudnnStatus_t max_count(int* n) const { return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n); }
  cudnnStatus_t operator()(int max, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* p) const {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x.d, c.y.d, c.conv.d, c.w.d, max, n, p);
  }
};

void* ptr(const Tensor& t) { return dptr<char>(t); }

const float kOne = 1.0f, kZero = 0.0f;  // alpha and beta: float for float and 16-bit data

}  // namespace

bool conv2d(const Tensor& x, const Tensor& weight, const Out& out, const Conv2dGeometry& g, int64_t groups) {
  Conv c("conv2d");
  return describe(c, x, weight, out, g, groups) &&
         run_first_fit<cudnnConvolutionFwdAlgoPerf_t, FwdList>(
             c, out, "cudnnConvolutionForward",
             [&](cudnnHandle_t h, cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
               return cudnnGetConvolutionForwardWorkspaceSize(h, c.x.d, c.w.d, c.conv.d, c.y.d, a, bytes);
             },
             [&](cudnnHandle_t h, cudnnConvolutionFwdAlgo_t a, void* ws, size_t bytes) {
               return cudnnConvolutionForward(h, &kOne, c.x.d, ptr(x), c.w.d, ptr(weight), c.conv.d, a, ws, bytes,
                                              &kZero, c.y.d, ptr(out));
             });
}

bool conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Out& grad_x, const Conv2dGeometry& g,
                           int64_t groups) {
  Conv c("conv2d_backward");
  // beta = 0: every element of grad_x is written, padding taps included.
  return describe(c, grad_x, weight, grad_out, g, groups) &&
         run_first_fit<cudnnConvolutionBwdDataAlgoPerf_t, BwdDataList>(
             c, grad_x, "cudnnConvolutionBackwardData",
             [&](cudnnHandle_t h, cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
               return cudnnGetConvolutionBackwardDataWorkspaceSize(h, c.w.d, c.y.d, c.conv.d, c.x.d, a, bytes);
             },
             [&](cudnnHandle_t h, cudnnConvolutionBwdDataAlgo_t a, void* ws, size_t bytes) {
               return cudnnConvolutionBackwardData(h, &kOne, c.w.d, ptr(weight), c.y.d, ptr(grad_out), c.conv.d, a, ws,
                                                   bytes, &kZero, c.x.d, ptr(grad_x));
             });
}

bool conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Out& grad_weight, const Conv2dGeometry& g,
                            int64_t groups) {
  Conv c("conv2d_backward");
  return describe(c, x, grad_weight, grad_out, g, groups) &&
         run_first_fit<cudnnConvolutionBwdFilterAlgoPerf_t, BwdFilterList>(
             c, grad_weight, "cudnnConvolutionBackwardFilter",
             [&](cudnnHandle_t h, cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
               return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c.x.d, c.y.d, c.conv.d, c.w.d, a, bytes);
             },
             [&](cudnnHandle_t h, cudnnConvolutionBwdFilterAlgo_t a, void* ws, size_t bytes) {
               return cudnnConvolutionBackwardFilter(h, &kOne, c.x.d, ptr(x), c.y.d, ptr(grad_out), c.conv.d, a, ws,
                                                     bytes, &kZero, c.w.d, ptr(grad_weight));
             });
}

#else  // built without cuDNN: conv2d always lowers to im2col + GEMM

namespace {
const KernelVariant<Conv2d> kConv2d(DeviceType::CUDA, "conv2d", {{Conv2d::Im2col, "im2col"}});
}  // namespace

bool conv2d(const Tensor&, const Tensor&, const Out&, const Conv2dGeometry&, int64_t) { return false; }
bool conv2d_backward_input(const Tensor&, const Tensor&, const Out&, const Conv2dGeometry&, int64_t) { return false; }
bool conv2d_backward_weight(const Tensor&, const Tensor&, const Out&, const Conv2dGeometry&, int64_t) { return false; }

#endif

}  // namespace mg::cuda
