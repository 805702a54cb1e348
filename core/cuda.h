// The CUDA device runtime: devices, streams, events, pinned host memory, asynchronous copies,
// the memory the CUDA context keeps beyond memgrad's own allocations, and the registry of kernel
// variants. Without MG_CUDA (or without a GPU) queries answer "none" and actions raise DeviceError.
// What needs no tensor is core/cuda/stream.h (included here); this header adds what takes tensors.
#pragma once
#include <memgrad/core/cuda/stream.h>
#include <memgrad/core/tensor.h>

namespace mg::cuda {

// Declares that `t`'s memory is in use on stream `s` (besides the stream it was allocated on): its
// block is not reused until the work queued on `s` at `t`'s release has finished. Call it when a
// tensor made on one stream is read or written by kernels on another, as PyTorch's record_stream.
// The caching allocator keys its free blocks by stream, so without this a block freed on stream A
// could go to a later request on A while B still uses it. DeviceError for a tensor not on cuda or
// a stream of another device; ValueError for an undefined tensor. A no-op for from_blob memory.
void record_stream(const Tensor& t, const Stream& s);

// Page-locked host memory, so copies can run asynchronously. Pinned tensors are cpu tensors; their
// bytes are counted in pinned_bytes(), not in the cpu ledger (they are not pageable memory).
Tensor empty_pinned(const Shape& shape, DType dtype = kFloat32);
Tensor pin_memory(const Tensor& t);
bool is_pinned(const Tensor& t);
// Enqueues dst <- src on the cuda side's current stream; both contiguous, same shape and dtype,
// one on cuda. With pinned host memory it returns before the copy ends: keep both alive and
// synchronise (stream or event) before reading or reusing the host side.
void copy_async(const Tensor& dst, const Tensor& src);

}  // namespace mg::cuda
