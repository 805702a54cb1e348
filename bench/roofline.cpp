// The machine's roofline on OMP_NUM_THREADS threads: the float32 FMA peak at each vector width the
// CPU runs (GFLOPs), and the memory bandwidth of two streams (GBs): a copy, and AdamW's update,
// which reads a parameter, its gradient and both moments and writes back three (28 bytes a float32
// parameter). bench/compare/run.sh divides a training step's matrix FLOPs by the peak and its AdamW
// bytes by that bandwidth: a floor for the step that no GEMM library, schedule or fusion of the same
// work goes below (issue 46). Wall time: the threads run in one OpenMP region each iteration.
//   bench_roofline [--benchmark_filter=fma/avx2]   fma/avx512 is registered where the CPU has it
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <memory>

namespace {

constexpr int kChains = 12;  // independent FMA chains: more than latency x ports on current x86 cores
constexpr int64_t kFmaIters = 1 << 22;

// Each thread runs kChains dependent chains of `iters` FMAs on registers of V.
#define MG_FMA_PEAK(NAME, TARGET, V, SET1, FMA)                                       \
  __attribute__((target(TARGET))) double NAME(int64_t iters) {                        \
    double sink = 0;                                                                  \
    _Pragma("omp parallel reduction(+ : sink)") {                                     \
      const V b = SET1(0.999f), c = SET1(1e-3f);                                      \
      V a[kChains];                                                                   \
      for (int i = 0; i < kChains; ++i) a[i] = SET1(float(i + omp_get_thread_num())); \
      for (int64_t k = 0; k < iters; ++k)                                             \
        for (int i = 0; i < kChains; ++i) a[i] = FMA(a[i], b, c);                     \
      for (int i = 0; i < kChains; ++i) sink += double(((const float*)&a[i])[0]);     \
    }                                                                                 \
    return sink;                                                                      \
  }
MG_FMA_PEAK(fma_avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps)
MG_FMA_PEAK(fma_avx512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps)
#undef MG_FMA_PEAK

void BM_FmaPeak(benchmark::State& state, double (*fma)(int64_t), int lanes) {
  for (auto _ : state) benchmark::DoNotOptimize(fma(kFmaIters));
  const double flops = 2.0 * lanes * kChains * double(kFmaIters) * omp_get_max_threads();
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = omp_get_max_threads();
}

// Streams over arrays far larger than the caches (4 x 128 MiB), first touched by the threads that use
// them, 64 bytes apart modulo 4 KiB: arrays that start alike there alias in the load-store unit (on Zen
// 4, AdamW's stream at 30 GB/s against 46).
constexpr int64_t kStreamFloats = int64_t(1) << 25;
struct Arrays {
  std::unique_ptr<float[]> block{new float[4 * kStreamFloats + 4096]};
  float *p, *g, *m, *v;
  Arrays() {
    float* at = block.get() + (1024 - reinterpret_cast<uintptr_t>(block.get()) / sizeof(float) % 1024);
    p = at, g = p + kStreamFloats + 16, m = g + kStreamFloats + 16, v = m + kStreamFloats + 16;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < kStreamFloats; ++i) p[i] = 1, g[i] = 1e-3f, m[i] = 0, v[i] = 0;
  }
};

__attribute__((target("avx2,fma"))) void copy(const float* src, float* dst) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < kStreamFloats; ++i) dst[i] = src[i];
}

// AdamW's update as optim/ computes it, in plain loops (the compiler vectorizes them: -fno-math-errno).
__attribute__((target("avx2,fma"))) void adamw(float* p, const float* g, float* m, float* v) {
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, decay = 1 - lr * 1e-2f;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < kStreamFloats; ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] = p[i] * decay - lr * m[i] / (std::sqrt(v[i]) + eps);
  }
}

void BM_StreamCopy(benchmark::State& state) {
  Arrays a;
  for (auto _ : state) {
    copy(a.g, a.p);
    benchmark::ClobberMemory();
  }
  state.counters["GBs"] = benchmark::Counter(8e-9 * kStreamFloats, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_StreamAdamW(benchmark::State& state) {
  Arrays a;
  for (auto _ : state) {
    adamw(a.p, a.g, a.m, a.v);
    benchmark::ClobberMemory();
  }
  state.counters["GBs"] = benchmark::Counter(28e-9 * kStreamFloats, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  __builtin_cpu_init();
  benchmark::RegisterBenchmark("fma/avx2", BM_FmaPeak, fma_avx2, 8)->UseRealTime()->Unit(benchmark::kMillisecond);
  if (__builtin_cpu_supports("avx512f"))
    benchmark::RegisterBenchmark("fma/avx512", BM_FmaPeak, fma_avx512, 16)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  if (__builtin_cpu_supports("avx2")) {
    benchmark::RegisterBenchmark("stream/copy", BM_StreamCopy)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("stream/adamw", BM_StreamAdamW)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
