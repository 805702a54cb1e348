#include <memgrad/plan/zero.h>

#include <cstdio>

#include <memgrad/core/random.h>

namespace mg::plan {

ModelStates model_states(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                         bool half_parameters) {
  GeneratorStateGuard rng;  // meta runs draw counters too: give them back
  const MemoryStats before = memory_stats(kMeta);
  ModelStates r;
  {
    train::ChainModel chain(model, kMeta);
    if (half_parameters) chain.module().to(kFloat16);
    r.parameters = chain.module().num_parameters();
    auto group = distributed::simulated_group(int(step.rank), int(step.world_size));
    distributed::DataParallel dp(chain.module().named_parameters(), *group,
                                 distributed::DataParallelOptions()
                                     .zero_stage(step.sharding_stage())
                                     .bucket_bytes(step.bucket_bytes)
                                     .units(chain.unit_names())
                                     .offload_parameters(step.offload_params));
    auto opt = optim::make_optimizer(step.optimizer, dp.optimizer_parameters());
    train::StepOptions o = step;
    if (half_parameters)
      o.precision = train::Precision::Float32, o.grad_scaler = false;  // the model computes in float16
    const auto batch = chain.zero_inputs(input);
    for (int s = 0; s < 2; ++s)
      train::train_step(
          chain, opt.get(), nullptr, [&](int64_t) { return batch; }, train::Policy::none(), o, &dp);
    const MemoryStats m = memory_stats(kMeta);
    auto held = [&](Category c) { return m.category(c) - before.category(c); };
    r.parameter = held(Category::Parameter), r.gradient = held(Category::Gradient);
    r.optimizer_state = held(Category::OptimizerState);
  }
  return r;
}

std::vector<distributed::RankClass> rank_classes(const train::ModelSpec& model, const train::StepOptions& step) {
  GeneratorStateGuard rng;
  const train::ChainModel chain(model, kMeta);
  const std::vector<std::string> units = chain.unit_names();
  std::vector<int64_t> numel;
  std::vector<size_t> unit;
  for (auto& [name, t] : chain.module().named_parameters()) {
    numel.push_back(t.numel());
    size_t k = 0;  // as ParameterUnits assigns them: the first unit whose path prefixes the name, else the root
    while (k < units.size() && name.compare(0, units[k].size() + 1, units[k] + ".") != 0) ++k;
    unit.push_back(k);
  }
  return distributed::rank_classes(numel, unit, step.sharding_stage(), step.world_size);
}

double zero_bytes_per_parameter(double p, double g, double k, int stage, int64_t world) {
  const double n = double(world);
  return (stage >= 3 ? p / n : p) + (stage >= 2 ? g / n : g) + (stage >= 1 ? k / n : k);
}

double optimizer_state_bytes_per_parameter(const optim::OptimizerSpec& optimizer, bool masters) {
  const double own = optimizer.is_none() ? 0 : optim::optimizer_entry(optimizer.name).state_bytes(optimizer);
  return own + (masters ? 4 : 0);
}

std::string zero_table(const train::ModelSpec& model, const train::InputShape& input, const train::StepOptions& step,
                       const train::Policy& policy) {
  std::string out;
  char line[256];
  auto add = [&out, &line](int n) { out.append(line, size_t(std::max(0, std::min(n, int(sizeof line) - 1)))); };
  add(std::snprintf(line, sizeof line, "ZeRO stages side by side: rank %lld of %lld, planned on meta\n",
                    static_cast<long long>(step.rank), static_cast<long long>(step.world_size)));
  add(std::snprintf(line, sizeof line, "  %-7s %14s %14s %14s %14s %14s\n", "stage", "peak B", "Parameter", "Gradient",
                    "OptState", "Workspace"));
  for (int stage = 0; stage <= 3; ++stage) {
    train::StepOptions o = step;
    o.zero_stage = stage, o.offload_params = false;
    PlanOptions quick;  // the peak and its categories (allocated figures) only
    quick.settle_reserved = false;
    const StepReport r = plan(model, input, o, policy, quick);
    add(std::snprintf(
        line, sizeof line, "  %-7d %14lld %14lld %14lld %14lld %14lld%s\n", stage, static_cast<long long>(r.peak),
        static_cast<long long>(r.category(Category::Parameter)), static_cast<long long>(r.category(Category::Gradient)),
        static_cast<long long>(r.category(Category::OptimizerState)),
        static_cast<long long>(r.category(Category::Workspace)), stage == step.sharding_stage() ? "   <- --zero" : ""));
  }
  out += "  (checkpoint " + policy.name +
         "; categories at each peak; Workspace: the buckets being reduced or gathered; stage 3's Parameter: the "
         "shards and the units gathered at the peak)\n\n";
  out += "bytes per parameter one rank holds between steps (parameters + gradients + optimizer state),\n";
  add(std::snprintf(line, sizeof line, "the ledger on meta / ZeRO's formula (Rajbhandari et al. 2020), N = %lld:\n",
                    static_cast<long long>(step.world_size)));
  add(std::snprintf(line, sizeof line, "  %-34s %17s %17s %17s %17s\n", "parameters, optimizer", "stage 0", "stage 1",
                    "stage 2", "stage 3"));
  for (bool half : {false, true}) {
    const int64_t p = half ? 2 : 4;
    const double k = optimizer_state_bytes_per_parameter(step.optimizer, half);
    char kt[32];
    std::snprintf(kt, sizeof kt, "%g", k);
    const std::string name = std::string(half ? "fp16 + fp32 masters" : "fp32") + " (" + std::to_string(p) + "+" +
                             std::to_string(p) + "+" + kt + ")";
    add(std::snprintf(line, sizeof line, "  %-34s", name.c_str()));
    for (int stage = 0; stage <= 3; ++stage) {
      train::StepOptions o = step;
      o.zero_stage = stage, o.offload_params = false;
      const ModelStates m = model_states(model, input, o, half);
      const std::string cell = [&] {
        char c[64];
        std::snprintf(c, sizeof c, "%.2f / %.2f", m.per_parameter(m.total()),
                      zero_bytes_per_parameter(double(p), double(p), double(k), stage, step.world_size));
        return std::string(c);
      }();
      add(std::snprintf(line, sizeof line, " %17s", cell.c_str()));
    }
    out += "\n";
  }
  out +=
      "  (the ledger rounds each tensor to 512 B and pads slices to ceil(n / N) elements per rank; stage 3 pads\n"
      "   each unit of parameters, a block or the root, to a multiple of N)\n";
  return out;
}

}  // namespace mg::plan
