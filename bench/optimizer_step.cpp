// One optimizer step alone, per optimizer, over a GPT's parameters with random gradients: the
// median step time after a first step (which creates the state), next to AdamW's, and the state's
// ledger bytes per parameter. The gradients stay (no backward), so only the update is timed. Each
// step's CPU time (all threads) is printed beside its wall time: on a shared machine the wall time
// also counts the time other processes held the cores.
//   bench_optimizer_step [model=gpt2-124m|tiny] [steps=5]
//   MG_DEVICE=cpu|cuda|cuda:N   where the parameters live (cpu)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

using namespace mg;
using Clock = std::chrono::steady_clock;

namespace {
double cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * double(t.tv_sec) + 1e-6 * double(t.tv_nsec);
}
}  // namespace

int main(int argc, char** argv) try {
  const std::string model = argc > 1 ? argv[1] : "gpt2-124m";
  const int steps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  const char* dev = std::getenv("MG_DEVICE");
  const Device device = dev && *dev ? Device(dev) : kCPU;
  nn::GPTConfig c;
  if (model == "gpt2-124m")
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768, c.vocab_size = 50257, c.block_size = 1024;
  else
    c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.vocab_size = 256, c.block_size = 64;
  c.options = c.options.device(device);
  manual_seed(0);
  nn::GPT gpt(c);
  const nn::NamedTensors params = gpt.named_parameters();
  for (auto& [name, p] : params) p.set_grad(randn(p.shape(), TensorOptions().device(device)) * 0.01);
  using Make = std::function<std::unique_ptr<optim::Optimizer>()>;
  const std::vector<std::pair<const char*, Make>> optimizers = {
      {"sgd", [&] { return std::make_unique<optim::SGD>(params, optim::SGDOptions(1e-3)); }},
      {"sgd+momentum", [&] { return std::make_unique<optim::SGD>(params, optim::SGDOptions(1e-3).momentum(0.9)); }},
      {"adam", [&] { return std::make_unique<optim::Adam>(params); }},
      {"adamw", [&] { return std::make_unique<optim::AdamW>(params); }},
      {"adam8bit", [&] { return std::make_unique<optim::Adam8bit>(params); }},
      {"adamw8bit", [&] { return std::make_unique<optim::AdamW8bit>(params); }},
      {"adafactor", [&] { return std::make_unique<optim::Adafactor>(params); }},
  };
  std::printf("one optimizer step over %s's %lld parameters on %s (median of %d steps after the first)\n",
              model.c_str(), static_cast<long long>(gpt.num_parameters()), device.str().c_str(), steps);
  std::printf("%-14s %12s %12s %16s\n", "optimizer", "wall ms", "cpu ms", "state B/param");
  std::vector<std::pair<std::string, double>> times;  // cpu ms
  double adamw = 0;
  for (auto& [name, make] : optimizers) {
    auto opt = make();
    opt->step();  // creates the state
    std::vector<double> wall, cpu;
    for (int s = 0; s < steps; ++s) {
      const auto t0 = Clock::now();
      const double c0 = cpu_ms();
      opt->step();
      if (device.is_cuda()) cuda::synchronize(device.index);
      wall.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      cpu.push_back(cpu_ms() - c0);
    }
    std::sort(wall.begin(), wall.end());
    std::sort(cpu.begin(), cpu.end());
    const double median = device.is_cuda() ? wall[wall.size() / 2] : cpu[cpu.size() / 2];
    if (std::string(name) == "adamw") adamw = median;
    times.emplace_back(name, median);
    std::printf("%-14s %12.2f %12.2f %16.3f\n", name, wall[wall.size() / 2], cpu[cpu.size() / 2],
                double(opt->state_bytes()) / double(gpt.num_parameters()));
  }
  std::printf("\nagainst adamw (%s %.2f ms):", device.is_cuda() ? "wall" : "cpu", adamw);
  for (auto& [name, t] : times) std::printf(" %s %.2fx;", name.c_str(), t / adamw);
  std::printf("\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_optimizer_step: %s\n", e.what());
  return 1;
}
