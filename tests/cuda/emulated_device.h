// Runs CUDA kernels on the host, for tests on machines without a GPU: every thread of a block is a
// fiber, blocks run one after another, and the collective operations (__syncthreads,
// __shfl_xor_sync, mma.sync m16n8k16) run once every thread taking part has reached them. A thread
// left waiting with nobody to meet (a barrier inside divergent code) fails the launch. Include it
// before the kernels' headers: it defines what a host compiler lacks (threadIdx, the intrinsics).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

#define MG_EMULATE_WARPS 1
#define __launch_bounds__(...)

namespace emu {

const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
void syncthreads();
uint64_t shfl_xor(uint64_t bits, int lane_mask);
// d = a * b + c on the warp's fragments (the PTX ISA's layout for m16n8k16 with 16-bit a and b).
void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16);

// Runs `kernel` on `grid` blocks of `threads` threads (x only); `shared` (of `shared_bytes`) is the
// block's shared memory, filled with 0xff bytes (NaN in 16 and 32 bits) before each block. Raises
// std::runtime_error when the threads of a block cannot all meet.
void launch(unsigned grid, unsigned threads, unsigned char* shared, size_t shared_bytes,
            const std::function<void()>& kernel);
// The same over x, y and z: warps are 32 consecutive threads in x-major order, as on the device.
void launch(dim3 grid, dim3 block, unsigned char* shared, size_t shared_bytes, const std::function<void()>& kernel);

// A fragment layout that is not the ISA's, to show that a test notices one: the a fragment's
// registers 1 and 2 exchanged (rows g + 8 and columns 2t + 8 mixed up), b's rows 2t + 1 and 2t + 8
// exchanged, or c's rows g and g + 8.
enum class Mutation { None, ARegisters, BRows, CRows };
void set_mutation(Mutation m);

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())

inline void __syncthreads() { emu::syncthreads(); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  bits = emu::shfl_xor(bits, lane_mask);
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
using std::isfinite;
using std::max;
using std::min;
inline void emulated_mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  emu::mma_16816(c, a, b0, b1, bf16);
}
