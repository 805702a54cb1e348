// GEMM throughput of each CPU matmul kernel variant ("auto", "onednn", "openblas", "eigen", as the
// build links them; kernels/cpu/gemm.cpp) on the float32 GEMM shapes of the compare workloads'
// training steps (bench/compare): the MLP (batch 256, 784 -> 1024 -> 1024 -> 10) and the GPT at
// n_embd 256 (8 x 128 tokens, vocab 4096, 4 heads).
// Each linear layer y = x @ W^T contributes its forward and both backward products with the
// layouts the ops pass (W^T and g^T are transposed views, not copies). Counter GFLOPs: 2MNK per
// second of the benchmark thread's CPU time: run with OMP_NUM_THREADS=1 for each variant's
// single-core efficiency, which a loaded shared machine does not distort as it does wall time
// (the 2-thread split is the same code for every variant).
#include <benchmark/benchmark.h>

#include <memgrad/memgrad.h>

namespace {

struct Shape {
  const char* name;
  int64_t batch, m, k, n;
  bool ta, tb;  // the left / right operand is a transposed view
};

// Rows: tokens (1024) or batch (256); linear [out, in]; the products of y = x W^T:
// fwd x[M,K] @ W^T, bwd-in g[M,N] @ W[N,K], bwd-w g^T[N,M] @ x[M,K].
#define MG_LINEAR(tag, rows, in, out)                                                         \
  {tag " fwd", 1, rows, in, out, false, true}, {tag " dx", 1, rows, out, in, false, false}, { \
    tag " dW", 1, out, rows, in, true, false                                                  \
  }
const Shape kShapes[] = {
    MG_LINEAR("mlp 784->1024", 256, 784, 1024),
    MG_LINEAR("mlp 1024->1024", 256, 1024, 1024),
    MG_LINEAR("mlp 1024->10", 256, 1024, 10),
    MG_LINEAR("gpt qkv 256->768", 1024, 256, 768),
    MG_LINEAR("gpt proj 256->256", 1024, 256, 256),
    MG_LINEAR("gpt fc 256->1024", 1024, 256, 1024),
    MG_LINEAR("gpt fc2 1024->256", 1024, 1024, 256),
    MG_LINEAR("gpt head 256->4096", 1024, 256, 4096),
    // attention core per (batch, head): q k^T [128,64]x[64,128] and p @ v, and their gradients
    {"gpt att q@k^T", 32, 128, 64, 128, false, true},
    {"gpt att p@v", 32, 128, 128, 64, false, false},
    {"gpt att dp^T@v", 32, 128, 128, 64, true, false},
    {"square 2048", 1, 2048, 2048, 2048, false, false},  // the machine's GEMM ceiling, for scale
};
#undef MG_LINEAR

void BM_Gemm(benchmark::State& state, const Shape& s, const std::string& variant) {
  mg::set_kernel_variant(mg::DeviceType::CPU, "matmul", variant);
  mg::NoGradGuard no_grad;
  auto operand = [&](int64_t r, int64_t c, bool t) {
    return t ? mg::randn({s.batch, c, r}).transpose(1, 2) : mg::randn({s.batch, r, c});
  };
  mg::Tensor a = operand(s.m, s.k, s.ta), b = operand(s.k, s.n, s.tb);
  for (auto _ : state) benchmark::DoNotOptimize(mg::matmul(a, b).impl());
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * s.batch * s.m * s.k * s.n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // Variants alternate within each shape, so load drifts hit both alike.
  for (const Shape& s : kShapes)
    for (const std::string& v : mg::kernel_variants(mg::DeviceType::CPU, "matmul"))
      benchmark::RegisterBenchmark((std::string(s.name) + "/" + v).c_str(), BM_Gemm, s, v);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
