// Latency of one allocate/release pair: the caching allocator, the same allocator with caching
// off (a segment from the system per allocation), and plain aligned malloc/free for reference.
// Run: bench_allocator (target of bench/allocator.cpp) --benchmark_filter=... ; sizes 512 B, 64 KiB, 4 MiB, 32 MiB.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include <memgrad/core/allocator.h>

namespace {

void alloc_free(benchmark::State& state, const mg::Device& d, bool caching) {
  const size_t n = size_t(state.range(0));
  mg::set_caching(d, caching);
  for (auto _ : state) {
    mg::Block* b = mg::memory::allocate(d, n, mg::Category::Temporary);
    benchmark::DoNotOptimize(b->ptr);
    mg::memory::release(b);
  }
  mg::set_caching(d, true);
  state.SetItemsProcessed(state.iterations());
}

void BM_cached_cpu(benchmark::State& s) { alloc_free(s, mg::kCPU, true); }
void BM_uncached_cpu(benchmark::State& s) { alloc_free(s, mg::kCPU, false); }
void BM_cached_meta(benchmark::State& s) { alloc_free(s, mg::kMeta, true); }

void BM_aligned_malloc(benchmark::State& state) {
  const size_t n = mg::memory::round_size(size_t(state.range(0)));
  for (auto _ : state) {
    void* p = std::aligned_alloc(512, n);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  state.SetItemsProcessed(state.iterations());
}

// A training-like pattern: 64 live blocks of mixed sizes, one replaced per iteration.
void BM_cached_cpu_mixed(benchmark::State& state) {
  const size_t sizes[] = {512, 4096, 65536, 1 << 20, 3 << 20};
  mg::Block* live[64] = {};
  for (int i = 0; i < 64; ++i) live[i] = mg::memory::allocate(mg::kCPU, sizes[i % 5], mg::Category::Temporary);
  size_t k = 0;
  for (auto _ : state) {
    size_t slot = (k * 37) % 64;
    mg::memory::release(live[slot]);
    live[slot] = mg::memory::allocate(mg::kCPU, sizes[k % 5] + k % 7 * 512, mg::Category::Temporary);
    ++k;
  }
  for (auto* b : live) mg::memory::release(b);
  state.SetItemsProcessed(state.iterations());
}

#define SIZES Arg(512)->Arg(64 << 10)->Arg(4 << 20)->Arg(32 << 20)
BENCHMARK(BM_cached_cpu)->SIZES;
BENCHMARK(BM_uncached_cpu)->SIZES;
BENCHMARK(BM_aligned_malloc)->SIZES;
BENCHMARK(BM_cached_meta)->SIZES;
BENCHMARK(BM_cached_cpu_mixed);

}  // namespace

BENCHMARK_MAIN();
