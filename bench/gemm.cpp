// GEMM throughput of each CPU matmul kernel variant ("auto", "onednn", "openblas", "eigen", as the
// build links them; kernels/cpu/gemm.cpp) on the float32 GEMM shapes of the compare workloads'
// training steps (bench/compare), as bench/gemm_shapes.txt lists them: each linear layer y = x @ W^T
// contributes its forward and both backward products with the layouts the ops pass (W^T and g^T are
// transposed views, not copies), and attention its batched products. Counter GFLOPs: 2MNK per
// second of the benchmark thread's CPU time: run with OMP_NUM_THREADS=1 for each variant's
// single-core efficiency, which a loaded shared machine does not distort as it does wall time
// (the 2-thread split is the same code for every variant). bench_gemm_libs calls the libraries
// directly, BLIS and libxsmm too, and with their own threading.
#include <benchmark/benchmark.h>

#include <memgrad/memgrad.h>

#include "gemm_shapes.h"

namespace {

using mg::bench::GemmShape;

void BM_Gemm(benchmark::State& state, const GemmShape& s, const std::string& variant) {
  mg::set_kernel_variant(mg::DeviceType::CPU, "matmul", variant);
  mg::NoGradGuard no_grad;
  auto operand = [&](int64_t r, int64_t c, bool t) {
    return t ? mg::randn({s.batch, c, r}).transpose(1, 2) : mg::randn({s.batch, r, c});
  };
  mg::Tensor a = operand(s.m, s.k, s.ta), b = operand(s.k, s.n, s.tb);
  for (auto _ : state) benchmark::DoNotOptimize(mg::matmul(a, b).impl());
  state.counters["GFLOPs"] = benchmark::Counter(s.gflop(), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // Variants alternate within each shape, so load drifts hit both alike.
  for (const GemmShape& s : mg::bench::gemm_shapes())
    for (const std::string& v : mg::kernel_variants(mg::DeviceType::CPU, "matmul"))
      benchmark::RegisterBenchmark((s.name + "/" + v).c_str(), BM_Gemm, s, v);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
