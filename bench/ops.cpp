// The perf mode of the op case list (tests/ops/cases_*.cpp): every case timed on every device,
// forward alone (no graph recorded) and forward + backward. On the cpu in the case's first dtype
// (float32 unless the case fixes its dtypes); on cuda in every floating dtype of the case and every
// combination of its kernel variants, each iteration ending with a device synchronisation.
// Benchmarks are named <op>/<case>/<device>[/<variant>]/<dtype>/forward (or forward+backward):
//   bench_ops --benchmark_filter='^layer_norm/'             one op
//   bench_ops --benchmark_filter='/cuda/.*/bfloat16/'       the gpu, one dtype
//   bench_ops --benchmark_list_tests                        the names
//   bench_ops --benchmark_filter='^chain/'                  the GPT block's fused chains against the
//                                                           single ops, at GPT shapes (cpu, float32)
// The small cases time per-op overhead (dispatch, checks, allocation, recording); the cases marked
// large time the kernels on sizes past a warp, a block and a grid-stride loop.
#include <benchmark/benchmark.h>

#include <cmath>
#include <functional>

#include <memgrad/core/cuda.h>

#include "ops/op_case.h"

namespace {

using namespace mg;
using namespace mg::optest;

void run(benchmark::State& state, const Case& c, DType t, const Device& d, const VariantSelection& variants,
         bool with_backward) {
  VariantGuard selected(variants, d.type);
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

// A fused chain or its composition, `f(inputs)`, on inputs of the given shapes (the first
// requires grad), forward alone or with a backward of sum(out * up) per output.
using Chain = std::function<Tensors(const Tensors&)>;
void run_chain(benchmark::State& state, const Chain& f, const std::vector<Shape>& shapes, bool with_backward) {
  manual_seed(0);
  Tensors in;
  for (const Shape& s : shapes) in.push_back(randn(s));
  in[0].requires_grad_(with_backward);
  Tensors up;
  for (const Tensor& o : f(in)) up.push_back(randn(o.shape()));
  for (auto _ : state) {
    Tensors out = f(in);
    if (!with_backward) continue;
    Tensor loss = (out[0] * up[0]).sum();
    for (size_t i = 1; i < out.size(); ++i) loss = loss + (out[i] * up[i]).sum();
    loss.backward();
    in[0].set_grad(Tensor());
  }
}

// The GPT block's chains at the shapes of bench_train_step's GPT workloads (n_embd 256, 4 heads;
// batch 8 x 128 and 4 x 512 tokens), each fused and composed.
void register_chains() {
  struct Row {
    std::string name;
    std::vector<Shape> shapes;
    Chain fused, composed;
  };
  auto softmax_rows = [](int64_t B, int64_t T) {
    const double scale = 0.125;
    return Row{"scaled_masked_softmax/" + std::to_string(B) + "x4x" + std::to_string(T) + "x" + std::to_string(T),
               {{B, 4, T, T}},
               [scale](const Tensors& x) { return Tensors{scaled_masked_softmax(x[0], scale, {}, true)}; },
               [scale, T](const Tensors& x) {
                 Tensor mask = triu(ones({T, T}, kBool), 1);
                 return Tensors{softmax(masked_fill(x[0] * scale, mask, -INFINITY), -1)};
               }};
  };
  auto ln_rows = [](int64_t rows) {
    return Row{"add_layer_norm/" + std::to_string(rows) + "x256",
               {{rows, 256}, {rows, 256}, {256}, {256}},
               [](const Tensors& x) {
                 auto [s, y] = add_layer_norm(x[0], x[1], {256}, x[2], x[3]);
                 return Tensors{s, y};
               },
               [](const Tensors& x) {
                 Tensor s = x[0] + x[1];
                 return Tensors{s, layer_norm(s, {256}, x[2], x[3])};
               }};
  };
  auto bda_rows = [](int64_t rows, double p) {
    return Row{"bias_dropout_add/" + std::to_string(rows) + "x256/p" + std::to_string(p).substr(0, 3),
               {{rows, 256}, {256}, {rows, 256}},
               [p](const Tensors& x) { return Tensors{bias_dropout_add(x[0], x[1], x[2], p)}; },
               [p](const Tensors& x) { return Tensors{x[2] + dropout(x[0] + x[1], p)}; }};
  };
  for (const Row& r : {softmax_rows(8, 128), softmax_rows(4, 512), ln_rows(1024), ln_rows(2048), bda_rows(1024, 0.0),
                       bda_rows(1024, 0.1)})
    for (bool fused : {true, false})
      for (bool backward : {false, true}) {
        const std::string name =
            "chain/" + r.name + (fused ? "/fused" : "/composed") + (backward ? "/forward+backward" : "/forward");
        benchmark::RegisterBenchmark(name.c_str(), [f = fused ? r.fused : r.composed, s = r.shapes,
                                                    backward](benchmark::State& st) { run_chain(st, f, s, backward); });
      }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::vector<Device> devices{kCPU};
  if (cuda_available()) devices.push_back(cuda_device(0));
  for (OpDef* op : all_ops())
    for (const Case& c : op->cases())
      for (const Device& d : devices)
        for (const VariantSelection& v : variant_selections(op->variant_ops(), d.type))
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
  register_chains();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
