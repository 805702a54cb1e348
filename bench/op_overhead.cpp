// Per-op overhead: a chain of 1000 tiny ops (add, mul, relu in turn) on a 16-element float32
// tensor, so the time is dispatch, checks, allocation and graph recording, not arithmetic.
// compare/op_overhead.py runs the same chain in PyTorch; run_op_overhead.sh prints the ratio.
#include <benchmark/benchmark.h>

#include <memgrad/memgrad.h>

namespace {

constexpr int kChain = 1000;

mg::Tensor chain(mg::Tensor x, const mg::Tensor& c) {
  for (int i = 0; i < kChain; i += 3) {
    x = mg::add(x, c);
    x = mg::mul(x, c);
    x = mg::relu(x);
  }
  return x;
}

// Reports seconds per op (shown with an n/u suffix) next to the time per chain.
void report(benchmark::State& state) {
  int ops = (kChain + 2) / 3 * 3;
  state.counters["per_op"] =
      benchmark::Counter(ops, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_Chain_NoGrad(benchmark::State& state) {
  mg::Tensor x = mg::randn({16}), c = mg::full({16}, 0.999);
  mg::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(chain(x, c).impl());
  report(state);
}

void BM_Chain_Record(benchmark::State& state) {  // builds the graph, then drops it
  mg::Tensor x = mg::randn({16}).requires_grad_(), c = mg::full({16}, 0.999);
  for (auto _ : state) benchmark::DoNotOptimize(chain(x, c).impl());
  report(state);
}

void BM_Chain_RecordBackward(benchmark::State& state) {  // forward with graph, then backward
  mg::Tensor x = mg::randn({16}).requires_grad_(), c = mg::full({16}, 0.999);
  for (auto _ : state) {
    chain(x, c).sum().backward();
    x.set_grad(mg::Tensor());
  }
  report(state);
}

}  // namespace

BENCHMARK(BM_Chain_NoGrad);
BENCHMARK(BM_Chain_Record);
BENCHMARK(BM_Chain_RecordBackward);
BENCHMARK_MAIN();
