// The emulator's own tests: its warp collectives and atomics against CUDA's definitions, and its
// checks against faults put in on purpose (the positive controls): an off-by-one index (memcheck),
// a __syncthreads removed from a real kernel (racecheck), shared memory read before it is written
// (initcheck), barriers and shuffles that threads reach apart (synccheck), a grid CUDA refuses.
#include <doctest/doctest.h>

#include "emulated_device.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/layer_norm.cuh>
#include <memgrad/kernels/cuda/map.cuh>
#include <memgrad/kernels/cuda/reduce.cuh>

#include <numeric>
#include <string>
#include <vector>

namespace {

using mg::cuda::SumOp;

// Each lane's shuffles and votes, written to out[lane * 8 + k].
__global__ void warp_ops_kernel(int* out) {
  const int lane = int(threadIdx.x);
  int* o = out + lane * 8;
  o[0] = __shfl_sync(0xffffffffu, lane * 10, 5);           // lane 5's
  o[1] = __shfl_sync(0xffffffffu, lane * 10, 3, 8);        // lane 3 of its group of 8
  o[2] = __shfl_up_sync(0xffffffffu, lane * 10, 3);        // lane - 3, or its own
  o[3] = __shfl_down_sync(0xffffffffu, lane * 10, 2, 16);  // lane + 2 within its 16, or its own
  o[4] = __shfl_xor_sync(0xffffffffu, lane * 10, 9);       // lane ^ 9
  o[5] = int(__ballot_sync(0xffffffffu, lane % 3 == 0));
  o[6] = __any_sync(0xffffffffu, lane == 17) + 2 * __all_sync(0xffffffffu, lane < 32);
  if (lane < 16) o[7] = __shfl_xor_sync(0x0000ffffu, lane * 10, 1);  // lanes 16..31 do not take part
}

// Every thread adds to the same counters, each atomic its own type.
__global__ void atomics_kernel(float* f, double* d, int* i, unsigned long long* u, __half* h, __nv_bfloat16* b,
                               unsigned* cas) {
  atomicAdd(f, 0.5f);
  atomicAdd(d, 0.25);
  atomicAdd(i, -1);
  atomicAdd(u, 3ull);
  atomicAdd(h, __float2half_rn(1.0f));
  atomicAdd(b, __float2bfloat16_rn(1.0f));
  atomicMax(i + 1, int(threadIdx.x));
  atomicMin(i + 2, int(threadIdx.x) - 5);
  unsigned old = *cas, assumed;
  do {
    assumed = old;
    old = atomicCAS(cas, assumed, assumed * 3 + 1);
  } while (old != assumed);
}

// Shared memory faults: `which` picks one. 0: none, 1: one element past a static array, 2: a read
// of an array no thread wrote, 3: one byte past the dynamic part.
__global__ void shared_faults_kernel(float* out, int which) {
  MG_SHARED(tile, float[32]);
  MG_SHARED(spare, float[8]);
  MG_DYNAMIC_SHARED(bytes);
  if (threadIdx.x < 32) tile[threadIdx.x] = float(threadIdx.x);
  bytes[threadIdx.x] = 1;
  __syncthreads();
  float v = tile[threadIdx.x % 32];
  const float* row = tile;  // a pointer: the fault is the emulator's to find, not UBSan's bounds check
  if (which == 1 && threadIdx.x == 7) v = row[threadIdx.x + 25];  // tile[32]
  if (which == 2 && threadIdx.x == 3) v = spare[5];
  if (which == 3 && threadIdx.x == 0) v = bytes[blockDim.x];
  out[threadIdx.x] = v;
}

struct Twice {
  __device__ float operator()(float v) const { return 2 * v; }
};
using TwiceKernel = void (*)(int64_t, float*, Twice, const float*);
constexpr TwiceKernel twice_kernel = mg::cuda::map_contiguous_kernel<1, float, Twice, float>;

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void early_exit_shuffle_kernel(float* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// The message of the LaunchError `f` raises ("" if none).
template <class F>
std::string launch_error(F f) {
  try {
    f();
  } catch (const emu::LaunchError& e) {
    return e.what();
  }
  return "";
}

bool checked() {
#ifdef EMU_UNCHECKED
  return false;
#else
  return true;
#endif
}

}  // namespace

TEST_CASE("emulator: shuffles and votes follow CUDA's definitions") {
  emu::Buffer<int> out("out", 32 * 8);
  emu::launch<warp_ops_kernel>({dim3(1), dim3(32)}, out.data());
  const std::vector<int> o = out.to_vector();
  for (int lane = 0; lane < 32; ++lane) {
    CAPTURE(lane);
    const int* r = &o[size_t(lane) * 8];
    CHECK(r[0] == 50);
    CHECK(r[1] == (lane / 8 * 8 + 3) * 10);
    CHECK(r[2] == (lane >= 3 ? lane - 3 : lane) * 10);
    CHECK(r[3] == (lane % 16 + 2 < 16 ? lane + 2 : lane) * 10);
    CHECK(r[4] == (lane ^ 9) * 10);
    CHECK(unsigned(r[5]) == 0x49249249u);  // lanes 0, 3, 6, ..., 30
    CHECK(r[6] == 3);
    if (lane < 16) CHECK(r[7] == (lane ^ 1) * 10);
  }
}

TEST_CASE("emulator: atomics add up over a grid, 16-bit ones rounding each sum") {
  emu::Buffer<float> f("f", std::vector<float>{0});
  emu::Buffer<double> d("d", std::vector<double>{0});
  emu::Buffer<int> i("i", std::vector<int>{0, -1, 1000});
  emu::Buffer<unsigned long long> u("u", std::vector<unsigned long long>{0});
  emu::Buffer<__half> h("h", std::vector<__half>{__float2half_rn(2040.f)});
  emu::Buffer<__nv_bfloat16> b("b", std::vector<__nv_bfloat16>{__float2bfloat16_rn(0.f)});
  emu::Buffer<unsigned> cas("cas", std::vector<unsigned>{0});
  emu::launch<atomics_kernel>({dim3(5), dim3(64)}, f.data(), d.data(), i.data(), u.data(), h.data(), b.data(),
                              cas.data());
  CHECK(f.to_vector()[0] == 160.f);
  CHECK(d.to_vector()[0] == 80.0);
  CHECK(i.to_vector() == std::vector<int>{-320, 63, -5});
  CHECK(u.to_vector()[0] == 960ull);
  CHECK(__half2float(h.to_vector()[0]) == 2048.f);     // 2040 + 1 + 1 ... reaches 2048 and stays (spacing 2 there)
  CHECK(__bfloat162float(b.to_vector()[0]) == 256.f);  // bfloat16 stops counting at 256 (spacing 2)
  unsigned want = 0;
  for (int k = 0; k < 320; ++k) want = want * 3 + 1;
  CHECK(cas.to_vector()[0] == want);
}

TEST_CASE("memcheck: an off-by-one index is caught, with the kernel, block, thread and offset") {
  if (!checked()) {
    MESSAGE("accesses unchecked in this build (GCC with AddressSanitizer)");
    return;
  }
  const int64_t n = 1000;
  const emu::Buffer<float> x("x", std::vector<float>(size_t(n), 1.f));
  emu::Buffer<float> y("y", size_t(n));
  const emu::Config c{dim3(2), dim3(64)};
  CHECK(launch_error([&] { emu::launch<twice_kernel>(c, n, y.data(), Twice{}, x.data()); }) == "");
  const std::string e = launch_error([&] { emu::launch<twice_kernel>(c, n + 1, y.data(), Twice{}, x.data()); });
  MESSAGE(e);
  CHECK(e.find("memcheck: map_contiguous_kernel") != std::string::npos);
  // element 1000 is thread 1000 % 128 = 104 of the grid-stride loop: block 1, thread 40
  CHECK(
      e.find(
          "block (1,0,0), thread (40,0,0): invalid global read of 4 bytes at 'x' + 4000, past its end (4000 bytes)") !=
      std::string::npos);
}

TEST_CASE("memcheck: shared memory past an array, or past the dynamic part") {
  if (!checked()) {
    MESSAGE("accesses unchecked in this build (GCC with AddressSanitizer)");
    return;
  }
  emu::Buffer<float> out("out", 64);
  const emu::Config c{dim3(2), dim3(64), 64};
  CHECK(launch_error([&] { emu::launch<shared_faults_kernel>(c, out.data(), 0); }) == "");
  const std::string past_array = launch_error([&] { emu::launch<shared_faults_kernel>(c, out.data(), 1); });
  CHECK(past_array.find("thread (7,0,0): invalid shared read of 4 bytes") != std::string::npos);
  CHECK(past_array.find("128 bytes into shared 'tile' of 128") != std::string::npos);
  const std::string past_dynamic = launch_error([&] { emu::launch<shared_faults_kernel>(c, out.data(), 3); });
  CHECK(past_dynamic.find("64 bytes into dynamic shared memory of 64") != std::string::npos);
}

TEST_CASE("racecheck: a __syncthreads removed from a real kernel is a hazard") {
  if (!checked()) {
    MESSAGE("accesses unchecked in this build (GCC with AddressSanitizer)");
    return;
  }
  using mg::cuda::reduce_kernels::reduce_rows_kernel;
  const int64_t rows = 3, r = 700;
  std::vector<float> xs(size_t(rows * r));
  std::iota(xs.begin(), xs.end(), 0.f);
  const emu::Buffer<float> x("x", xs);
  emu::Buffer<float> out("out", size_t(rows));
  const emu::Config c{dim3(2), dim3(256)};
  const auto sum = mg::kernels::ReduceOp::Sum;
  REQUIRE(launch_error([&] { emu::launch<reduce_rows_kernel<float, float>>(c, x.data(), out.data(), rows, r, sum); }) ==
          "");
  CHECK(out.to_vector()[1] == float(r * (r * 3 - 1) / 2));
  // block_reduce's second barrier: the warps' partial sums written, then read by every thread
  emu::skip_barrier(1);
  const std::string e =
      launch_error([&] { emu::launch<reduce_rows_kernel<float, float>>(c, x.data(), out.data(), rows, r, sum); });
  emu::skip_barrier(-1);
  MESSAGE(e);
  CHECK(e.find("racecheck: reduce_rows_kernel") != std::string::npos);
  CHECK(e.find("block (0,0,0), thread (1,0,0): read-after-write hazard on shared 'shared' + 0: threads 0 and 1") !=
        std::string::npos);

  // layer norm's two block reductions: the first barrier of the second (written again while the
  // first's partial sums may still be read)
  using mg::cuda::layer_norm_kernels::layer_norm_kernel;
  emu::Buffer<float> y("y", xs.size()), mean("mean", size_t(rows)), rstd("rstd", size_t(rows));
  auto norm = [&] {
    emu::launch<layer_norm_kernel<false, float, true>>(c, x.data(), nullptr, nullptr, y.data(), mean.data(),
                                                       rstd.data(), rows, r, 1e-5);
  };
  REQUIRE(launch_error(norm) == "");
  emu::skip_barrier(2);
  const std::string war = launch_error(norm);
  emu::skip_barrier(-1);
  MESSAGE(war);
  CHECK(war.find("write-after-read hazard on shared 'shared'") != std::string::npos);
}

TEST_CASE("initcheck: shared memory read before any thread wrote it") {
  if (!checked()) {
    MESSAGE("accesses unchecked in this build (GCC with AddressSanitizer)");
    return;
  }
  emu::Buffer<float> out("out", 64);
  const std::string e = launch_error([&] {
    emu::launch<shared_faults_kernel>({dim3(1), dim3(64), 64}, out.data(), 2);
  });
  CHECK(e.find("initcheck: shared_faults_kernel, block (0,0,0), thread (3,0,0): read of shared 'spare' + 20, which no "
               "thread of the block has written") != std::string::npos);
}

TEST_CASE("synccheck: barriers and shuffles that the threads reach apart") {
  emu::Buffer<float> out("out", 64);
  const std::string barriers = launch_error([&] {
    emu::launch<divergent_barrier_kernel>({dim3(1), dim3(64)}, out.data());
  });
  CHECK(barriers.find("synccheck: divergent_barrier_kernel, block (0,0,0): threads (0,0,0) and (32,0,0) wait at "
                      "different __syncthreads") != std::string::npos);
  const std::string exited = launch_error([&] {
    emu::launch<early_exit_shuffle_kernel>({dim3(1), dim3(32)}, out.data());
  });
  CHECK(exited.find("lane 3 has exited, but is in the mask of a shuffle") != std::string::npos);
}

TEST_CASE("emulator: launch configurations CUDA refuses are refused") {
  emu::Buffer<float> out("out", 64);
  const std::string e = launch_error([&] {
    emu::launch<divergent_barrier_kernel>({dim3(1, 65536), dim3(64)}, out.data());
  });
  CHECK(e.find("invalid configuration argument (grid (1,65536,1)") != std::string::npos);
  CHECK(launch_error([&] { emu::launch<divergent_barrier_kernel>({dim3(1), dim3(2048)}, out.data()); }) != "");
}
