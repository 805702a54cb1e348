// Times every CUDA kernel variant against the device's measured peaks: device-to-device copy
// bandwidth for memory-bound kernels, GEMM rate for matmul, conv2d (cuDNN and im2col) and causal
// attention. The optimizer rows time the fused multi-tensor AdamW and SGD steps and the loss
// scaler's inf/NaN check. kernels.py times PyTorch on the same rows.
//   bench_gpu_kernels [--quick] [--json FILE]
// Exits 77 when no CUDA device is present.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

using namespace mg;

namespace {

const Device kGPU = cuda_device(0);

// Median milliseconds of `reps` runs of f, after warm-up, timed with CUDA events.
double time_ms(const std::function<void()>& f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cuda::Event a(true), b(true);
    a.record();
    f();
    b.record();
    b.synchronize();
    ms.push_back(a.elapsed_ms(b));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Row {
  std::string op, variant, shape;
  double ms, rate;  // GB/s or TFLOP/s
  const char* unit;
  double fraction;  // of the measured peak
};

// One run: its sizes (smaller with --quick), the peaks it measured and its rows.
struct Bench {
  bool quick;
  int reps;
  int64_t R;  // rows of the [R, C] activations
  static constexpr int64_t C = 768, V = 50257;
  double copy_gbs = 0, gemm_tflops = 0;
  std::vector<Row> rows;

  explicit Bench(bool q) : quick(q), reps(q ? 5 : 20), R(q ? 2048 : 8192) {}
  void mem_row(const std::string& op, const std::string& variant, const std::string& shape, double bytes,
               const std::function<void()>& f) {
    double ms = time_ms(f, reps), gbs = bytes / ms / 1e6;
    rows.push_back({op, variant, shape, ms, gbs, "GB/s", gbs / copy_gbs});
  }
  void flop_row(const std::string& op, const std::string& variant, const std::string& shape, double flops,
                const std::function<void()>& f) {
    double ms = time_ms(f, reps), tf = flops / ms / 1e9;
    rows.push_back({op, variant, shape, ms, tf, "TFLOP/s", tf / gemm_tflops});
  }
  void gemm_row(const std::string& op, const std::string& shape, double flops, const std::function<void()>& f) {
    flop_row(op, "cublas", shape, flops, f);
  }
};

// ---- peaks measured in this run
void measure_peaks(Bench& b) {
  const int64_t n = b.quick ? (int64_t(1) << 24) : (int64_t(1) << 28);  // float32 elements
  Tensor src = randn({n}, kGPU), dst = empty({n}, kGPU);
  double copy_ms = time_ms([&] { dst.copy_(src); }, b.reps);
  b.copy_gbs = 2.0 * double(n) * 4 / copy_ms / 1e6;
  std::printf("peak copy bandwidth: %.0f GB/s (device-to-device, %.0f MiB)\n", b.copy_gbs, double(n) * 4 / (1 << 20));
  const int64_t g = b.quick ? 2048 : 8192;
  Tensor ga = randn({g, g}, kGPU).to(kBFloat16), gb = randn({g, g}, kGPU).to(kBFloat16);
  double gemm_ms = time_ms([&] { matmul(ga, gb); }, b.reps);
  b.gemm_tflops = 2.0 * double(g) * g * g / gemm_ms / 1e9;
  std::printf("peak GEMM rate: %.1f TFLOP/s (bfloat16, %lld^3)\n", b.gemm_tflops, (long long)g);
}

// ---- memory-bound kernels (bytes = what must cross DRAM at least once)
void memory_rows(Bench& bench) {
  const int64_t R = bench.R, C = Bench::C, V = Bench::V;
  Tensor x = randn({R, C}, kGPU), y = randn({R, C}, kGPU), w = randn({C}, kGPU), b = randn({C}, kGPU);
  Tensor xh = x.to(kBFloat16);
  const double e = double(R) * C;
  bench.mem_row("copy", "cast f32->bf16", "8192x768", e * 6, [&] { x.to(kBFloat16); });
  bench.mem_row("unary", "gelu", "8192x768", e * 8, [&] { gelu(x); });
  bench.mem_row("unary", "gelu bf16", "8192x768", e * 4, [&] { gelu(xh); });
  bench.mem_row("binary", "add", "8192x768", e * 12, [&] { add(x, y); });
  bench.mem_row("binary", "add bias (broadcast)", "8192x768", e * 8, [&] { add(x, b); });
  bench.mem_row("bias_gelu", "fused", "8192x768", e * 8, [&] { bias_gelu(x, b, GeluApprox::Tanh); });
  bench.mem_row("bias_gelu", "add, then gelu", "8192x768", e * 8, [&] { gelu(add(x, b), GeluApprox::Tanh); });
  bench.mem_row("reduce", "sum rows", "8192x768", e * 4, [&] { sum(x, {1}); });
  bench.mem_row("reduce", "sum cols", "8192x768", e * 4, [&] { sum(x, {0}); });
  bench.mem_row("softmax", "rows", "8192x768", e * 8, [&] { softmax(x, -1); });
  bench.mem_row("dropout", "philox", "8192x768", e * 8, [&] { dropout(x, 0.1); });
  for (const std::string& v : cuda::kernel_variants("layer_norm")) {
    cuda::set_kernel_variant("layer_norm", v);
    bench.mem_row("layer_norm", v, "8192x768", e * 8, [&] { layer_norm(x, {C}, w, b); });
  }
  cuda::set_kernel_variant("layer_norm", cuda::kernel_variants("layer_norm").front());
  {
    const int64_t N = bench.quick ? 1024 : 8192;
    Tensor logits = randn({N, V}, kGPU), target = randint(0, V, {N}, TensorOptions(kInt64).device(kGPU));
    bench.mem_row("cross_entropy", "fused", std::to_string(N) + "x50257", double(N) * V * 4,
                  [&] { cross_entropy(logits, target); });
  }
  {
    Tensor idx = randint(0, V, {R}, TensorOptions(kInt64).device(kGPU)), wte = randn({V, C}, kGPU);
    bench.mem_row("index_select", "embedding", "8192 of 50257x768", e * 8, [&] { embedding(wte, idx); });
  }
}

// Multi-tensor optimizer steps over GPT-2-124M's parameter shapes (2 layers with --quick):
// AdamW reads param, grad and both moments and writes three of them (28 B per float32 element).
void optimizer_rows(Bench& bench) {
  const int64_t C = Bench::C, V = Bench::V;
  std::vector<Shape> shapes = {{V, C}, {1024, C}, {C}, {C}};
  for (int l = 0; l < (bench.quick ? 2 : 12); ++l)
    for (Shape s :
         std::vector<Shape>{{C}, {C}, {C, 3 * C}, {3 * C}, {C, C}, {C}, {C}, {C}, {C, 4 * C}, {4 * C}, {4 * C, C}, {C}})
      shapes.push_back(s);
  std::vector<Tensor> params, grads;
  double elems = 0;
  for (auto& s : shapes) {
    params.push_back(randn(s, kGPU).requires_grad_());
    grads.push_back(randn(s, kGPU) * 1e-3);
    params.back().set_grad(grads.back());
    elems += double(numel_of(s));
  }
  std::string shape = std::to_string(shapes.size()) + " tensors, " + std::to_string(int64_t(elems / 1e6)) + "M";
  optim::AdamW adamw(params);
  bench.mem_row("optimizer", "adamw fused", shape, elems * 28, [&] { adamw.step(); });
  optim::SGD sgd(params, optim::SGDOptions(1e-3).momentum(0.9));
  bench.mem_row("optimizer", "sgd momentum fused", shape, elems * 20, [&] { sgd.step(); });
  bench.mem_row("grad_scaler", "inf/NaN check", shape, elems * 4, [&] { amp::any_non_finite(grads); });
}

// ---- GEMMs
void gemm_rows(Bench& bench) {
  const int64_t R = bench.R, C = Bench::C;
  for (DType t : {kFloat32, kBFloat16, kFloat16}) {
    Tensor a = randn({R, C}, kGPU).to(t), m = randn({C, 4 * C}, kGPU).to(t);
    bench.gemm_row(std::string("matmul ") + dtype_name(t), "8192x768 @ 768x3072", 2.0 * R * C * 4 * C,
                   [&] { matmul(a, m); });
  }
  cuda::set_allow_tf32(true);
  {
    Tensor a = randn({R, C}, kGPU), m = randn({C, 4 * C}, kGPU);
    bench.gemm_row("matmul tf32", "8192x768 @ 768x3072", 2.0 * R * C * 4 * C, [&] { matmul(a, m); });
  }
  cuda::set_allow_tf32(false);
}

// ---- conv2d, every variant: a ResNet stage-1 3x3 convolution (batch 8 with --quick).
// Forward is 2*N*O*(C*9)*(H*W) FLOPs; backward twice that (input and weight gradients).
void conv_rows(Bench& bench) {
  const int64_t N = bench.quick ? 8 : 32, Cc = 64, Hh = 56, O = 64;
  const double fwd = 2.0 * N * O * (Cc * 9) * (Hh * Hh);
  const std::string shape = std::to_string(N) + "x64x56x56 3x3->64";
  for (DType t : {kFloat32, kBFloat16}) {
    Tensor cx = randn({N, Cc, Hh, Hh}, kGPU).to(t), cw = (randn({O, Cc, 3, 3}, kGPU) * 0.05).to(t);
    Tensor up = randn({N, O, Hh, Hh}, kGPU).to(t);
    for (const std::string& v : cuda::kernel_variants("conv2d")) {
      cuda::set_kernel_variant("conv2d", v);
      const std::string op = std::string("conv2d ") + dtype_name(t);
      bench.flop_row(op, v + " fwd", shape, fwd, [&] { conv2d(cx, cw, Tensor(), {1}, {1}); });
      bench.flop_row(op, v + " fwd+bwd", shape, 3 * fwd, [&] {
        EnableGradGuard grad;
        Tensor x = cx.detach().requires_grad_(), w = cw.detach().requires_grad_();  // fresh leaves: no accumulation
        conv2d(x, w, Tensor(), {1}, {1}).backward(up);
      });
    }
  }
  cuda::set_kernel_variant("conv2d", cuda::kernel_variants("conv2d").front());
}

// ---- causal attention, GPT-2 small's heads (batch 8, 12 heads, 1024 x 64; batch 2 with --quick):
// fused (no [T, T] matrix) against the explicit matmul/mask/softmax/matmul. Both are credited
// with the causal FLOPs: 4 * BH * T(T+1)/2 * D forward, 2.5x that for backward.
void attention_rows(Bench& bench) {
  const int64_t Bn = bench.quick ? 2 : 8, Hn = 12, T = 1024, D = 64;
  const double fwd = 4.0 * Bn * Hn * (T * (T + 1) / 2.0) * D;
  const std::string shape = std::to_string(Bn) + "x12x1024x64 causal";
  Tensor r = arange(0, T, 1, TensorOptions(kInt64).device(kGPU)), mask = gt(r.unsqueeze(0), r.unsqueeze(1));
  for (DType t : {kFloat32, kBFloat16}) {
    Tensor q = randn({Bn, Hn, T, D}, kGPU).to(t), k = randn({Bn, Hn, T, D}, kGPU).to(t),
           v = randn({Bn, Hn, T, D}, kGPU).to(t), up = randn({Bn, Hn, T, D}, kGPU).to(t);
    auto explicit_attention = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return matmul(softmax(masked_fill(matmul(a, b.transpose(-1, -2)) * 0.125, mask, -INFINITY), -1), c);
    };
    auto with_grad = [&](auto attention) {
      EnableGradGuard grad;
      Tensor a = q.detach().requires_grad_(), b = k.detach().requires_grad_(), c = v.detach().requires_grad_();
      attention(a, b, c).backward(up);
    };
    const std::string op = std::string("attention ") + dtype_name(t);
    // The default variant's rows, then (16-bit only: float32 always runs simt) each other variant's.
    for (const std::string& variant : cuda::kernel_variants("attention")) {
      const bool first = variant == cuda::kernel_variants("attention").front();
      if (!first && t == kFloat32) continue;
      cuda::set_kernel_variant("attention", variant);
      const std::string tag = first ? "" : " (" + variant + ")";
      bench.flop_row(op, "fused fwd" + tag, shape, fwd, [&] { scaled_dot_product_attention(q, k, v, {}, 0.0, true); });
      bench.flop_row(op, "fused fwd+bwd" + tag, shape, 3.5 * fwd, [&] {
        with_grad([](const Tensor& a, const Tensor& b, const Tensor& c) {
          return scaled_dot_product_attention(a, b, c, {}, 0.0, true);
        });
      });
    }
    cuda::set_kernel_variant("attention", cuda::kernel_variants("attention").front());
    bench.flop_row(op, "explicit fwd", shape, fwd, [&] { explicit_attention(q, k, v); });
    bench.flop_row(op, "explicit fwd+bwd", shape, 3.5 * fwd, [&] { with_grad(explicit_attention); });
  }
}

// The table on stdout, and the rows as JSON in `json` when given.
void report(const Bench& bench, const std::string& device, const std::string& json) {
  std::printf("\n%-16s %-22s %-22s %10s %12s %9s\n", "op", "variant", "shape", "ms", "rate", "of peak");
  for (auto& r : bench.rows)
    std::printf("%-16s %-22s %-22s %10.4f %8.1f %-7s %5.1f%%\n", r.op.c_str(), r.variant.c_str(), r.shape.c_str(), r.ms,
                r.rate, r.unit, 100 * r.fraction);
  if (json.empty()) return;
  const std::vector<Row>& rows = bench.rows;
  std::ofstream out(json);
  out << "{\"device\": \"" << device << "\", \"copy_gbs\": " << bench.copy_gbs
      << ", \"gemm_tflops\": " << bench.gemm_tflops << ", \"kernels\": [";
  for (size_t i = 0; i < rows.size(); ++i)
    out << (i ? ", " : "") << "{\"op\": \"" << rows[i].op << "\", \"variant\": \"" << rows[i].variant
        << "\", \"ms\": " << rows[i].ms << ", \"rate\": " << rows[i].rate << ", \"unit\": \"" << rows[i].unit
        << "\", \"fraction\": " << rows[i].fraction << "}";
  out << "]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      json = argv[++i];
  }
  if (!cuda_available()) {
    std::printf("bench_gpu_kernels: no CUDA device, nothing to time\n");
    return 77;
  }
  auto props = cuda::properties(0);
  std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB)\n", props.name.c_str(), props.major, props.minor,
              props.multiprocessors, double(props.total_memory) / (1 << 30));
  NoGradGuard no_grad;
  Bench bench(quick);
  measure_peaks(bench);
  memory_rows(bench);
  optimizer_rows(bench);
  gemm_rows(bench);
  conv_rows(bench);
  attention_rows(bench);
  report(bench, props.name, json);
  return 0;
}
