// The perf mode of the op case list (tests/ops/cases_*.cpp): every case timed on every device,
// forward alone (no graph recorded) and forward + backward. On the cpu in the case's first dtype
// (float32 unless the case fixes its dtypes); on cuda in every floating dtype of the case and every
// combination of its kernel variants, each iteration ending with a device synchronisation.
// Benchmarks are named <op>/<case>/<device>[/<variant>]/<dtype>/forward (or forward+backward):
//   bench_ops --benchmark_filter='^layer_norm/'             one op
//   bench_ops --benchmark_filter='/cuda/.*/bfloat16/'       the gpu, one dtype
//   bench_ops --benchmark_list_tests                        the names
// The small cases time per-op overhead (dispatch, checks, allocation, recording); the cases marked
// large time the kernels on sizes past a warp, a block and a grid-stride loop.
#include <benchmark/benchmark.h>

#include <memgrad/core/cuda.h>

#include "ops/op_case.h"

namespace {

using namespace mg;
using namespace mg::optest;

void run(benchmark::State& state, const Case& c, DType t, const Device& d, const VariantSelection& variants,
         bool with_backward) {
  for (const auto& [kernel, variant] : variants) cuda::set_kernel_variant(kernel, variant);
  if (d.is_cuda()) cuda::set_allow_tf32(c.tf32);
  Tensors leaves = make_leaves(c, t, d, with_backward);
  const Tensors up = with_backward ? upstream_for(c, forward(c, leaves), d) : Tensors{};
  for (auto _ : state) {
    Tensors out = forward(c, leaves);
    if (with_backward) {
      backward(out, up);
      for (Tensor& x : leaves) x.set_grad(Tensor());
    }
    if (d.is_cuda()) cuda::synchronize();
  }
  if (d.is_cuda()) cuda::set_allow_tf32(false);
}

std::string device_name(const Device& d) { return d.is_cuda() ? "cuda" : "cpu"; }

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::vector<Device> devices{kCPU};
  if (cuda_available()) devices.push_back(cuda_device(0));
  for (OpDef* op : all_ops())
    for (const Case& c : op->cases())
      for (const Device& d : devices)
        for (const VariantSelection& v :
             d.is_cuda() ? variant_selections(op->variant_ops()) : std::vector<VariantSelection>{{}})
          for (DType t : d.is_cuda() ? c.run_dtypes() : std::vector<DType>{c.run_dtypes().front()}) {
            const std::string variant = variant_label(v);
            const std::string name = op->name() + "/" + c.name + "/" + device_name(d) +
                                     (variant.empty() ? "" : "/" + variant) + "/" + dtype_name(t);
            benchmark::RegisterBenchmark((name + "/forward").c_str(),
                                         [&c, t, d, v](benchmark::State& s) { run(s, c, t, d, v, false); });
            if (c.has_gradient())
              benchmark::RegisterBenchmark((name + "/forward+backward").c_str(),
                                           [&c, t, d, v](benchmark::State& s) { run(s, c, t, d, v, true); });
          }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
