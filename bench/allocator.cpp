// Latency of one allocate/release pair: the caching allocator, the same allocator with caching
// off (a segment from the system per allocation), and plain aligned malloc/free for reference;
// then the default allocator against expandable segments (set_allocator_config), on a mixed
// pattern and on the default `memgrad train` step.
// Run: bench_allocator (target of bench/allocator.cpp) --benchmark_filter=... ; sizes 512 B, 64 KiB, 4 MiB, 32 MiB.
// The modes side by side: --benchmark_filter=mode --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <optional>

#include <memgrad/core/allocator.h>
#include <memgrad/plan/planner.h>

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

// The allocator's mode for a benchmark (range 0: default, 1: expandable segments), in an allocator
// of its own that starts empty.
struct Mode {
  explicit Mode(const benchmark::State& state) {
    mg::set_allocator_config(state.range(0) ? "expandable_segments:True" : "expandable_segments:False");
    fresh.emplace(mg::kCPU);
  }
  ~Mode() {
    fresh.reset();
    mg::set_allocator_config("expandable_segments:False");
  }
  std::optional<mg::IsolatedAllocator> fresh;
};

// A training-like pattern: 64 live blocks of mixed sizes, one replaced per iteration.
void mixed(benchmark::State& state) {
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
void BM_cached_cpu_mixed(benchmark::State& state) { mixed(state); }
void BM_mode_mixed(benchmark::State& state) {
  Mode mode(state);
  mixed(state);
}

// The default `memgrad train` step (tiny GPT: 4 layers, 4 heads, width 128, vocabulary 256; batch
// 16 x 64; AdamW, clip 1.0) after one warm-up step that grows the cache; reports the reserved peak.
void BM_mode_train_step(benchmark::State& state) {
  Mode mode(state);
  mg::nn::GPTConfig c;
  c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.vocab_size = 256, c.block_size = 64;
  mg::train::StepOptions options;
  options.clip_norm = 1.0;
  const mg::train::InputShape input{16, 64};
  mg::plan::StepContext ctx = mg::plan::context(input);
  ctx.device = mg::kCPU;
  const mg::plan::Step step = mg::plan::program(mg::train::ModelSpec::gpt_model(c), input, options)(ctx);
  step();
  for (auto _ : state) step();
  const mg::MemoryStats s = mg::memory_stats(mg::kCPU);
  state.counters["allocated_peak"] = double(s.peak_allocated);
  state.counters["reserved_peak"] = double(s.peak_reserved);
}

#define SIZES Arg(512)->Arg(64 << 10)->Arg(4 << 20)->Arg(32 << 20)
BENCHMARK(BM_cached_cpu)->SIZES;
BENCHMARK(BM_uncached_cpu)->SIZES;
BENCHMARK(BM_aligned_malloc)->SIZES;
BENCHMARK(BM_cached_meta)->SIZES;
BENCHMARK(BM_cached_cpu_mixed);
BENCHMARK(BM_mode_mixed)->Arg(0)->Arg(1);
BENCHMARK(BM_mode_train_step)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
