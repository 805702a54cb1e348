// Plan your own model, then train it: the planner's numbers are the ones the run shows.
//
// A residual ConvNet with BatchNorm (examples/convnet.h) learns which quadrant of a noisy 8x8 image
// is bright. The training program builds the model on whatever device it is handed and runs one
// step; plan::plan runs it on the meta device (no bytes) to the steady state, plan::measure trains
// it for real on the CPU. For float32 and for bfloat16 (autocast, and stored in bfloat16 with
// float32 masters) the program checks that:
//   - the planned allocated peaks (first step, later steps) and reserved peak equal the measured;
//   - a memory limit of the planned reserved peak trains, and one 512 B granule less runs out of
//     memory in the step the plan says;
//   - the loss falls.
// It exits non-zero otherwise (ctest: example_plan_convnet).
//
//   plan_convnet [steps]      steps of real training per precision (default 40)
#include <cstdio>
#include <cstdlib>
#include <random>

#include "convnet.h"

namespace {

int failures = 0;
void check(bool ok, const std::string& claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim.c_str());
  failures += !ok;
}

// Images of noise with one bright quadrant, labelled by the quadrant (0-3), drawn from a counter.
convnet::Data quadrants(uint64_t seed) {
  auto counter = std::make_shared<uint64_t>(0);
  return [seed, counter](int64_t batch, int64_t size, const mg::Device& device) {
    std::mt19937_64 rng(seed + (*counter)++);
    std::normal_distribution<float> noise(0.f, 1.f);
    std::vector<float> x(size_t(batch * 3 * size * size));
    std::vector<int64_t> y(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      y[size_t(b)] = int64_t(rng() % 4);
      const int64_t r0 = y[size_t(b)] / 2 * size / 2, c0 = y[size_t(b)] % 2 * size / 2;
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t i = 0; i < size; ++i)
          for (int64_t j = 0; j < size; ++j) {
            const bool bright = i >= r0 && i < r0 + size / 2 && j >= c0 && j < c0 + size / 2;
            x[size_t(((b * 3 + c) * size + i) * size + j)] = noise(rng) * 0.5f + (bright ? 1.5f : 0.f);
          }
    }
    return std::make_pair(mg::tensor(x, {batch, 3, size, size}).to(device), mg::tensor(y, {batch}).to(device));
  };
}

std::string bytes(int64_t b) { return std::to_string(b) + " B (" + mg::format_bytes(b) + ")"; }

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 40;
  const int64_t channels = 16, blocks = 3, size = 8, batch = 32;
  mg::plan::StepContext ctx;
  ctx.batch = batch;
  std::printf("residual ConvNet, %lld blocks of %lld channels, BatchNorm, batch %lld x 3 x %lld x %lld, AdamW\n\n",
              (long long)blocks, (long long)channels, (long long)batch, (long long)size, (long long)size);
  std::printf("%-13s %-22s %14s %14s %14s %14s\n", "precision", "", "first step", "later steps", "reserved",
              "smallest limit");
  for (auto precision :
       {mg::train::Precision::Float32, mg::train::Precision::BFloat16, mg::train::Precision::BFloat16Storage}) {
    mg::train::StepOptions step;
    step.optimizer = mg::optim::OptimizerSpec("adamw");
    step.precision = precision;
    // The plan: zeros for data, on meta, for the CPU's kernels.
    const mg::plan::StepReport planned = mg::plan::plan(convnet::program(channels, blocks, size, step), ctx);
    // The run: real images, real steps, in a fresh CPU allocator.
    auto loss = std::make_shared<double>(0);
    const mg::plan::Program train = convnet::program(channels, blocks, size, step, quadrants(7), loss);
    mg::plan::StepContext cpu = ctx;
    cpu.device = mg::kCPU;
    mg::plan::PlanOptions first;
    first.steps = 1;
    mg::plan::measure(train, cpu, first);
    const double first_loss = *loss;
    mg::plan::PlanOptions run;
    run.steps = steps;
    const mg::plan::StepReport measured = mg::plan::measure(train, cpu, run);
    const double last_loss = *loss;
    const char* name = mg::train::precision_name(precision);
    std::printf("%-13s %-22s %14lld %14lld %14lld %14lld\n", name, "planned on meta", (long long)planned.first_peak,
                (long long)planned.peak, (long long)planned.reserved, (long long)planned.smallest_limit);
    std::printf("%-13s %-22s %14lld %14lld %14lld\n", "", ("trained, " + std::to_string(steps) + " steps").c_str(),
                (long long)measured.first_peak, (long long)measured.peak, (long long)measured.reserved);
    // Under a limit of the smallest planned one, and a granule below it (the steps the plan needed).
    mg::plan::PlanOptions at;
    at.memory_limit = planned.smallest_limit;
    const mg::plan::StepReport limited = mg::plan::measure(train, cpu, at);
    at.memory_limit -= mg::plan::kGranule;
    const mg::plan::StepReport below = mg::plan::measure(train, cpu, at);
    std::printf("%-13s %-22s %14s %14lld %14lld\n", "", "under the limit", "", (long long)limited.peak,
                (long long)limited.reserved);
    check(measured.first_peak == planned.first_peak && measured.peak == planned.peak,
          std::string(name) + ": allocated peaks planned == measured: " + bytes(planned.peak));
    check(measured.reserved == planned.reserved,
          std::string(name) + ": reserved peak planned == measured: " + bytes(planned.reserved));
    check(!limited.out_of_memory && limited.reserved == planned.smallest_limit,
          std::string(name) + ": trains under a limit of the planned reserved peak " + bytes(planned.smallest_limit));
    check(below.out_of_memory && below.steps == planned.below_limit_fails_at,
          std::string(name) + ": 512 B less runs out of memory in step " + std::to_string(below.steps) + " as planned");
    check(last_loss < 0.5 * first_loss, std::string(name) + ": the loss falls from " + std::to_string(first_loss) +
                                            " to " + std::to_string(last_loss));
    std::printf("\n");
  }
  if (failures) std::printf("%d claim(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
