// Runs CUDA kernels on the host, for tests on machines without a GPU, and checks them as
// compute-sanitizer would on one. Every thread of a block is a fiber; blocks run one after another;
// the collective operations (__syncthreads, __syncwarp, shuffles, votes, mma.sync m16n8k16) run once
// every thread taking part has reached them. Include it before the kernels' headers: it defines
// what a host compiler lacks (threadIdx, the intrinsics, atomics, MG_SHARED).
//
// The checks see every memory access of the kernels' code, which tests/CMakeLists.txt compiles with
// access instrumentation (emulated_memory.cpp has the hooks):
//   memcheck   global accesses outside the live emu::Buffers, shared accesses outside the block's
//              shared memory (each MG_SHARED array and the dynamic part, with red zones between);
//   racecheck  a shared byte written by one thread and read or written by another in one barrier
//              interval (__syncthreads; __syncwarp for the threads of one warp);
//   initcheck  a global byte read before a copy or a kernel gave it a value, a shared byte read
//              before any thread of the block wrote it;
//   synccheck  threads of a block waiting at different __syncthreads, and warp collectives whose
//              lanes disagree or have exited.
// A launch that breaks one raises emu::LaunchError with the kernel, block, thread and offset.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define MG_EMULATE_WARPS 1  // attention_mma.cuh calls emulated_mma_16816 for mma.sync
#define __launch_bounds__(...)

namespace emu {

// ---- launches
struct Config {
  dim3 grid{1, 1, 1}, block{32, 1, 1};
  size_t shared_bytes = 0;  // dynamic shared memory (MG_DYNAMIC_SHARED)
};

// What a launch broke (memcheck, racecheck, initcheck, synccheck), or threads that cannot meet.
class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// Runs `thread` once per thread of every block of `c`; `kernel` is launch's __PRETTY_FUNCTION__.
void run(const char* kernel, const Config& c, const std::function<void()>& thread);
// The calling thread's kernel code starts: its memory accesses are checked from here on.
void arm();
template <auto Kernel>
const char* pretty() {
  return __PRETTY_FUNCTION__;
}
template <auto Kernel, class... P, class... Args>
void launch(void (*)(P...), const Config& c, Args&&... args) {
  const std::tuple<std::decay_t<P>...> params(std::forward<Args>(args)...);
  run(pretty<Kernel>(), c, [&params] {
    std::tuple<std::decay_t<P>...> mine(params);  // the thread's own arguments, copied before the checks start
    arm();
    std::apply(Kernel, mine);
  });
}
}  // namespace detail

// Runs __global__ function Kernel on c.grid blocks of c.block threads (whole warps) with args,
// as Kernel<<<c.grid, c.block, c.shared_bytes>>>(args...) would. Raises LaunchError (above).
template <auto Kernel, class... Args>
void launch(const Config& c, Args&&... args) {
  detail::launch<Kernel>(Kernel, c, std::forward<Args>(args)...);
}

// The kernels (their names without namespaces or template arguments) that launches have run.
const std::set<std::string>& executed_kernels();

// ---- device memory: what kernels may read and write (memcheck), with red zones around it, and
// which of its bytes hold values (initcheck: a kernel reads none it has not been given or written)
namespace detail {
// `bytes` (filled with 0xff: NaN in floating types) of which the first `initialized` hold values;
// `reserved` more past them are the allocation's rounding, initialized.
void* device_alloc(size_t bytes, size_t reserved, size_t initialized, const char* name);
void device_free(void* p);
}  // namespace detail

template <class T>
class Buffer {
 public:
  // n elements no kernel has written yet.
  Buffer(const char* name, size_t n) : Buffer(name, n, false) {}
  // A copy of v.
  Buffer(const char* name, const std::vector<T>& v) : Buffer(name, v.size(), true) {
    if (!v.empty()) std::memcpy(p_, v.data(), v.size() * sizeof(T));
  }
  Buffer(Buffer&& o) noexcept : n_(o.n_), p_(o.p_) { o.p_ = nullptr; }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() { detail::device_free(p_); }
  T* data() const { return p_; }
  size_t size() const { return n_; }
  std::vector<T> to_vector() const {
    std::vector<T> v(n_);
    if (n_) std::memcpy(v.data(), p_, n_ * sizeof(T));
    return v;
  }

 private:
  // 1-byte elements take whole 32-bit words, as the device's allocations (512 B in memgrad's
  // allocator) do: atomic_add on them compares and swaps the word that holds the byte.
  Buffer(const char* name, size_t n, bool initialized)
      : n_(n),
        p_(static_cast<T*>(detail::device_alloc(n * sizeof(T), sizeof(T) == 1 ? (4 - n % 4) % 4 : 0,
                                                initialized ? n * sizeof(T) : 0, name))) {}
  size_t n_;
  T* p_;
};

// ---- shared memory (MG_SHARED, MG_DYNAMIC_SHARED below)
struct SharedDecl {
  const char* name;
  size_t bytes, align;
};
void* static_shared(const SharedDecl* decl);
unsigned char* dynamic_shared();
template <class T>
using type_t = T;

// ---- the warp's collectives and the thread's coordinates
uint3 thread_idx();
uint3 block_idx();
dim3 block_dim();
dim3 grid_dim();
void syncthreads(const char* file, int line);
void syncwarp(unsigned mask);
enum class Shuffle : uint8_t { Index, Up, Down, Xor };
uint64_t shuffle(Shuffle kind, unsigned mask, uint64_t bits, int arg, int width);
enum class Vote : uint8_t { Ballot, Any, All };
unsigned vote(Vote kind, unsigned mask, bool predicate);
unsigned active_mask();
// d = a * b + c on the warp's fragments (the PTX ISA's layout for m16n8k16 with 16-bit a and b).
void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16);
[[noreturn]] void trap();

template <class T>
T shuffle_value(Shuffle kind, unsigned mask, T v, int arg, int width) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  bits = shuffle(kind, mask, bits, arg, width);
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// ---- controls: faults put in on purpose, to show that a test or a check notices them
// A fragment layout that is not the ISA's: the a fragment's registers 1 and 2 exchanged (rows g + 8
// and columns 2t + 8 mixed up), b's rows 2t + 1 and 2t + 8 exchanged, or c's rows g and g + 8.
enum class Mutation { None, ARegisters, BRows, CRows };
void set_mutation(Mutation m);
// Every thread skips its n-th __syncthreads of each block (from 0; -1: none), as if it were removed.
void skip_barrier(int n);

}  // namespace emu

// Static and dynamic shared memory: bytes of the block's shared arena (poisoned with 0xff before
// each block), so that the checks see every access and its bounds.
#define MG_SHARED(name, ...)                                                                         \
  static constexpr ::emu::SharedDecl name##_decl_{#name, sizeof(__VA_ARGS__), alignof(__VA_ARGS__)}; \
  ::emu::type_t<__VA_ARGS__>& name = *static_cast<::emu::type_t<__VA_ARGS__>*>(::emu::static_shared(&name##_decl_))
#define MG_DYNAMIC_SHARED(name) unsigned char* const name = ::emu::dynamic_shared()

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
#define warpSize 32
#define __syncthreads() ::emu::syncthreads(__FILE__, __LINE__)

inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::syncwarp(mask); }
template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return emu::shuffle_value(emu::Shuffle::Index, mask, v, src_lane, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu::shuffle_value(emu::Shuffle::Up, mask, v, int(delta), width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu::shuffle_value(emu::Shuffle::Down, mask, v, int(delta), width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return emu::shuffle_value(emu::Shuffle::Xor, mask, v, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int p) { return emu::vote(emu::Vote::Ballot, mask, p != 0); }
inline int __any_sync(unsigned mask, int p) { return int(emu::vote(emu::Vote::Any, mask, p != 0)); }
inline int __all_sync(unsigned mask, int p) { return int(emu::vote(emu::Vote::All, mask, p != 0)); }
inline unsigned __activemask() { return emu::active_mask(); }
inline void __trap() { emu::trap(); }
template <class T>
T __ldg(const T* p) {
  return *p;
}

// Atomics (emulated_memory.cpp): checked as accesses of their own kind, never racing each other.
float atomicAdd(float* p, float v);
double atomicAdd(double* p, double v);
int atomicAdd(int* p, int v);
unsigned atomicAdd(unsigned* p, unsigned v);
unsigned long long atomicAdd(unsigned long long* p, unsigned long long v);
__half atomicAdd(__half* p, __half v);
__nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v);
int atomicSub(int* p, int v);
unsigned atomicSub(unsigned* p, unsigned v);
int atomicMax(int* p, int v);
unsigned atomicMax(unsigned* p, unsigned v);
long long atomicMax(long long* p, long long v);
unsigned long long atomicMax(unsigned long long* p, unsigned long long v);
int atomicMin(int* p, int v);
unsigned atomicMin(unsigned* p, unsigned v);
long long atomicMin(long long* p, long long v);
unsigned long long atomicMin(unsigned long long* p, unsigned long long v);
unsigned short atomicCAS(unsigned short* p, unsigned short compare, unsigned short v);
int atomicCAS(int* p, int compare, int v);
unsigned atomicCAS(unsigned* p, unsigned compare, unsigned v);
unsigned long long atomicCAS(unsigned long long* p, unsigned long long compare, unsigned long long v);
int atomicExch(int* p, int v);
unsigned atomicExch(unsigned* p, unsigned v);
unsigned long long atomicExch(unsigned long long* p, unsigned long long v);
float atomicExch(float* p, float v);
int atomicOr(int* p, int v);
unsigned atomicOr(unsigned* p, unsigned v);
unsigned long long atomicOr(unsigned long long* p, unsigned long long v);
int atomicAnd(int* p, int v);
unsigned atomicAnd(unsigned* p, unsigned v);
unsigned long long atomicAnd(unsigned long long* p, unsigned long long v);
int atomicXor(int* p, int v);
unsigned atomicXor(unsigned* p, unsigned v);
unsigned long long atomicXor(unsigned long long* p, unsigned long long v);

// The device's math library, as host functions of the same precision (float overloads for float).
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) {  // rounded, never contracted into an FMA with what follows
  volatile float r = a * b;
  return r;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
using std::isfinite;  // the rest (exp, min, ...) device_common.cuh takes from std:: for the kernels
using std::isinf;
using std::isnan;
inline void emulated_mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  emu::mma_16816(c, a, b0, b1, bf16);
}
