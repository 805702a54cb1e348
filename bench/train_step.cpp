// One training step (zero_grad, forward, loss, backward, AdamW step) of an MLP or a GPT: the
// median step time after warm-up and the ledger's peak over one steady-state step. Prints one JSON
// object; bench/compare/train_step.py runs the same workloads in PyTorch. Then as many steps again
// under a KernelProfile: time in the matmul kernels, in all kernels, and by kernel (ms and calls per
// step). Beside each timed step, counts that load on a shared machine hardly changes (train_step.py
// reads the same): page faults, voluntary and involuntary context switches of the whole process, its
// threads, and the machine's steal time (a virtual CPU's time taken by the host: the machine's share
// of a step's swing).
//   bench_train_step mlp [steps=20] [batch=256] [in=784] [hidden=1024] [layers=2] [classes=10]
//   bench_train_step gpt [steps=10] [n_layer=4] [n_head=4] [n_embd=128] [vocab=2048] [batch=8] [seq=128]
//   bench_train_step gpt-fused ...   the same GPT with fused attention (scaled_dot_product_attention)
// The environment picks the rest (train_step.py reads the same names):
//   MG_DEVICE=cpu|cuda|cuda:N          where the step runs (cpu)
//   MG_PRECISION=fp32|tf32|bf16|fp16   float32; float32 with TF32 matmuls (cuda); bf16 or fp16 autocast
//   MG_CHECKPOINT=none|every-K|sqrt|selective   GPT recompute-on-backward (as memgrad train --checkpoint)
//   MG_KERNEL_VARIANTS=cpu:matmul=eigen   kernel variants (core/variants.h), e.g. cuda:attention=simt
//   MG_FUSED_ELEMENTWISE=0             the GPT block's element-wise chains as single ops (before/after)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <memgrad/memgrad.h>

using namespace mg;
using Clock = std::chrono::steady_clock;

namespace {

// CPU seconds used by the whole process (all threads): next to wall time on a shared machine.
double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Counters of the whole process (all threads), and the machine's steal time, at one instant.
struct Counters {
  double faults = 0, voluntary = 0, involuntary = 0, steal_ms = 0;
  int threads = 0;
};
Counters counters() {
  Counters c;
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  c.faults = double(u.ru_minflt + u.ru_majflt), c.voluntary = double(u.ru_nvcsw), c.involuntary = double(u.ru_nivcsw);
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) c.threads += e->d_name[0] != '.';
    closedir(d);
  }
  std::ifstream stat("/proc/stat");  // "cpu  user nice system idle iowait irq softirq steal ...", in ticks
  std::string line, cpu;
  std::getline(stat, line);
  std::istringstream in(line);
  double v[8] = {};
  in >> cpu;
  for (double& x : v) in >> x;
  c.steal_ms = v[7] * 1e3 / double(sysconf(_SC_CLK_TCK));
  return c;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Workload {
  std::string name, config;
  std::shared_ptr<nn::Module> model;
  std::function<Tensor()> loss;  // forward and loss on the fixed batch
};

Workload make_mlp(const std::vector<int64_t>& a, const Device& device) {
  const int64_t batch = a[0], in = a[1], hidden = a[2], layers = a[3], classes = a[4];
  auto net = std::make_shared<nn::Sequential>();
  for (int64_t i = 0, width = in; i < layers; ++i, width = hidden) {
    net->emplace_back<nn::Linear>(width, hidden);
    net->emplace_back<nn::ReLU>();
  }
  net->emplace_back<nn::Linear>(layers > 0 ? hidden : in, classes);
  net->to(device);
  Tensor x, y;
  {
    MemoryScope scope(Category::Input, "batch");
    x = randn({batch, in}, device);
    y = randint(0, classes, {batch}, TensorOptions(kInt64).device(device));
  }
  char cfg[160];
  std::snprintf(cfg, sizeof cfg, "batch %lld, %lld -> %lld x %lld (ReLU) -> %lld", (long long)batch, (long long)in,
                (long long)layers, (long long)hidden, (long long)classes);
  return {"mlp", cfg, net, [net, x, y] { return cross_entropy(net->forward(x), y); }};
}

// The GPT as the planner and memgrad train run it (train::ChainModel), its blocks under MG_CHECKPOINT's
// policy (train::Policy::parse: the same names, segments and selective recompute as --checkpoint).
Workload make_gpt(const std::vector<int64_t>& a, bool fused, const Device& device, const std::string& checkpoint) {
  nn::GPTConfig c;
  c.fused_attention = fused;
  const char* fuse = std::getenv("MG_FUSED_ELEMENTWISE");
  c.fused_elementwise = !fuse || std::strcmp(fuse, "0") != 0;
  c.n_layer = a[0], c.n_head = a[1], c.n_embd = a[2], c.vocab_size = a[3], c.block_size = a[5];
  const train::Policy policy = train::Policy::parse(checkpoint, c.n_layer);
  const int64_t batch = a[4], seq = a[5];
  auto gpt = std::make_shared<train::ChainModel>(train::ModelSpec::gpt_model(c), device);
  Tensor idx, targets;
  {
    MemoryScope scope(Category::Input, "batch");
    idx = randint(0, c.vocab_size, {batch, seq}, TensorOptions(kInt64).device(device));
    targets = randint(0, c.vocab_size, {batch, seq}, TensorOptions(kInt64).device(device));
  }
  char cfg[160];
  std::snprintf(cfg, sizeof cfg, "n_layer %lld, n_head %lld, n_embd %lld, vocab %lld, batch %lld x %lld%s",
                (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd, (long long)c.vocab_size,
                (long long)batch, (long long)seq, fused ? ", fused attention" : "");
  if (!c.fused_elementwise) std::strncat(cfg, ", unfused element-wise", sizeof cfg - std::strlen(cfg) - 1);
  if (checkpoint != "none")
    std::strncat(cfg, (", checkpoint " + checkpoint).c_str(), sizeof cfg - std::strlen(cfg) - 1);
  // The module shares the chain's ownership, so the Workload keeps both alive.
  std::shared_ptr<nn::Module> module(gpt, &gpt->module());
  return {"gpt", cfg, module, [gpt, idx, targets, policy] { return gpt->loss(idx, targets, policy); }};
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string kind = argc > 1 ? argv[1] : "mlp";
  auto arg = [&](int i, int64_t fallback) { return argc > i ? int64_t(std::atoll(argv[i])) : fallback; };
  const bool gpt = kind == "gpt" || kind == "gpt-fused";
  if (!gpt && kind != "mlp") {
    std::fprintf(stderr, "usage: bench_train_step mlp|gpt|gpt-fused [steps] [sizes...]\n");
    return 2;
  }
  const Device device(env_or("MG_DEVICE", "cpu"));
  const std::string precision = env_or("MG_PRECISION", "fp32"), checkpoint = env_or("MG_CHECKPOINT", "none");
  if (precision != "fp32" && precision != "tf32" && precision != "bf16" && precision != "fp16")
    throw ValueError("MG_PRECISION: expected fp32, tf32, bf16 or fp16, got " + precision);
  if (precision == "tf32") {
    if (!device.is_cuda())
      throw ValueError("MG_PRECISION=tf32: TF32 matmuls are cuda's, got MG_DEVICE=" + device.str());
    cuda::set_allow_tf32(true);
  }
  if (!gpt && checkpoint != "none") throw ValueError("MG_CHECKPOINT: the mlp has no checkpoint segments");
  const int steps = int(arg(2, gpt ? 10 : 20)), warmup = 3;
  manual_seed(0);
  Workload w = gpt ? make_gpt({arg(3, 4), arg(4, 4), arg(5, 128), arg(6, 2048), arg(7, 8), arg(8, 128)},
                              kind == "gpt-fused", device, checkpoint)
                   : make_mlp({arg(3, 256), arg(4, 784), arg(5, 1024), arg(6, 2), arg(7, 10)}, device);
  // bf16/fp16: autocast over forward and loss (float32 parameters, gradients and AdamW state), as
  // torch.autocast in train_step.py; fp16 without a loss scaler, as there.
  const bool half = precision == "bf16" || precision == "fp16";
  const amp::AutocastState autocast{half, precision == "bf16" ? kBFloat16 : kFloat16};
  optim::AdamW opt(w.model->parameters(), optim::AdamWOptions(1e-3));
  // What AdamW updates: its bytes per step are a floor (bench/compare, bench_roofline).
  const int64_t params = w.model->num_parameters();
  double loss = 0;
  auto step = [&] {
    opt.zero_grad(/*set_to_none=*/true);
    Tensor l;
    {
      amp::AutocastGuard guard(autocast.dtype, autocast.enabled);
      l = w.loss();
    }
    l.backward();
    opt.step();
    loss = l.item<double>();
  };

  for (int i = 0; i < warmup; ++i) step();  // the first step also creates the optimizer state
  reset_peak(device);                       // peak and matrix FLOPs of one steady-state step
  double gemm_flops = 0;
  {
    FlopCounter flops;
    step();
    gemm_flops = flops.total();
  }
  MemoryStats s = memory_stats(device);
  std::vector<double> ms, cpu_ms, faults, voluntary, involuntary, steal_ms;
  int threads_max = 0;
  for (int i = 0; i < steps; ++i) {
    const Counters k0 = counters();
    auto t0 = Clock::now();
    double c0 = cpu_seconds();
    step();
    ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - t0).count());
    cpu_ms.push_back(1e3 * (cpu_seconds() - c0));
    const Counters k1 = counters();
    faults.push_back(k1.faults - k0.faults), voluntary.push_back(k1.voluntary - k0.voluntary);
    involuntary.push_back(k1.involuntary - k0.involuntary), steal_ms.push_back(k1.steal_ms - k0.steal_ms);
    threads_max = std::max({threads_max, k0.threads, k1.threads});
  }
  // As many steps again under a KernelProfile each: the time inside the matmul kernels (GEMM), in all
  // kernels, and outside them (dispatch, allocation, autograd), per step. Kept apart from the timed
  // steps above, so the clock reads of profiling never touch the step_ms figures.
  std::vector<double> matmul_ms, kernel_ms, profiled_ms;
  KernelProfile all;  // every profiled step: the per-kernel totals (profiles nest)
  for (int i = 0; i < steps; ++i) {
    KernelProfile profile;
    auto t0 = Clock::now();
    step();
    profiled_ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - t0).count());
    matmul_ms.push_back(1e3 * profile.seconds("matmul"));
    kernel_ms.push_back(1e3 * profile.seconds());
  }
  const std::vector<KernelProfile::Entry> by_kernel = all.entries();
  const char* threads = std::getenv("OMP_NUM_THREADS");
  const std::string gemm = kernel_variant(DeviceType::CPU, "matmul");
  std::printf("{\"cpu_isa\": \"%s\", \"cpu_matmul\": \"%s: %s\", ", to_string(cpu_isa()), gemm.c_str(),
              kernel_variant_detail(DeviceType::CPU, "matmul", gemm).c_str());
  std::printf(
      "\"workload\": \"%s\", \"config\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"checkpoint\": "
      "\"%s\", \"threads\": \"%s\", \"steps\": %d, \"step_ms\": %.3f, "
      "\"min_ms\": %.3f, \"cpu_ms\": %.3f, \"peak_bytes\": %lld, \"peak_allocated\": %lld, \"gemm_gflop\": %.4f, "
      "\"params\": %lld, "
      "\"loss\": %.6f, \"ms\": [",
      w.name.c_str(), w.config.c_str(), device.str().c_str(), precision.c_str(), checkpoint.c_str(),
      threads ? threads : "unset", steps, median(ms), *std::min_element(ms.begin(), ms.end()), median(cpu_ms),
      (long long)s.peak_requested, (long long)s.peak_allocated, gemm_flops * 1e-9, (long long)params, loss);
  for (size_t i = 0; i < ms.size(); ++i) std::printf("%s%.3f", i ? ", " : "", ms[i]);
  std::printf("], \"cpu_ms_all\": [");
  for (size_t i = 0; i < cpu_ms.size(); ++i) std::printf("%s%.3f", i ? ", " : "", cpu_ms[i]);
  std::printf(
      "], \"faults\": %.0f, \"csw_voluntary\": %.0f, \"csw_involuntary\": %.0f, \"steal_ms\": %.1f, "
      "\"process_threads\": %d",
      median(faults), median(voluntary), median(involuntary), median(steal_ms), threads_max);
  std::printf(", \"profiled_step_ms\": %.3f, \"matmul_ms\": %.3f, \"kernel_ms\": %.3f, \"kernels_ms\": {",
              median(profiled_ms), median(matmul_ms), median(kernel_ms));
  for (size_t i = 0; i < by_kernel.size(); ++i)
    std::printf("%s\"%s\": %.3f", i ? ", " : "", by_kernel[i].kernel.c_str(), 1e3 * by_kernel[i].seconds / steps);
  std::printf("}, \"kernel_calls\": {");  // per step
  for (size_t i = 0; i < by_kernel.size(); ++i)
    std::printf("%s\"%s\": %lld", i ? ", " : "", by_kernel[i].kernel.c_str(), (long long)(by_kernel[i].calls / steps));
  std::printf("}}\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_train_step: %s\n", e.what());
  return 2;
}
