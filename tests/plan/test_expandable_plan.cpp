// Expandable segments in the planner: meta maps and unmaps the same 2 MiB pages as the CPU, so a plan
// states the reserved bytes of this mode to the byte, and the cache holds at most 2 MiB + one page
// per stream (the CPU has one) beyond the allocated peak. docs/memory.md prints the same table.
#include <doctest/doctest.h>

#include <memgrad/core/allocator.h>
#include <memgrad/plan/planner.h>

using namespace mg;

namespace {

constexpr int64_t MiB = int64_t(1) << 20;

// The allocator's mode for the scope; the default comes back even when a check throws.
struct Mode {
  explicit Mode(bool expandable) {
    set_allocator_config(expandable ? "expandable_segments:True" : "expandable_segments:False");
  }
  ~Mode() { set_allocator_config("expandable_segments:False"); }
};

struct Job {
  const char* name;
  train::ModelSpec model;
  train::InputShape input;
  train::StepOptions step;
};

nn::GPTConfig gpt(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t vocab, int64_t block) {
  nn::GPTConfig c;
  c.n_layer = n_layer, c.n_head = n_head, c.n_embd = n_embd, c.vocab_size = vocab, c.block_size = block;
  return c;
}

// The default `memgrad train` job (tiny GPT, batch 16 x 64, AdamW, clip 1.0), the planner tests' GPT
// and MLP.
std::vector<Job> jobs() {
  train::StepOptions clipped;
  clipped.clip_norm = 1.0;
  return {
      {"memgrad train (tiny GPT, 16 x 64)", train::ModelSpec::gpt_model(gpt(4, 4, 128, 256, 64)), {16, 64}, clipped},
      {"tests' tiny GPT, 3 x 16", train::ModelSpec::gpt_model(gpt(4, 2, 32, 64, 16)), {3, 16}, {}},
      {"MLP 9 x 40, batch 5", train::ModelSpec::mlp(9, 40), {5, 1}, {optim::OptimizerSpec("sgd", 0.9)}},
      {"MLP 8 x 256, batch 64", train::ModelSpec::mlp(8, 256), {64, 1}, {}}};
}

plan::StepReport run(const Job& job, bool on_cpu, int64_t steps = 0) {
  plan::StepContext ctx = plan::context(job.input);
  plan::PlanOptions o;
  o.smallest_limit = false;
  if (steps) o.steps = steps;
  if (!on_cpu) return plan::plan(plan::program(job.model, job.input, job.step), ctx, o);
  ctx.device = kCPU;
  return plan::measure(plan::program(job.model, job.input, job.step), ctx, o);
}

}  // namespace

TEST_CASE("plan: with expandable segments, planned == measured, and reserved - allocated <= 2 MiB + one page") {
  for (const Job& job : jobs()) {
    INFO(job.name);
    plan::StepReport fixed;
    {
      Mode m(false);
      fixed = run(job, false);
    }
    Mode m(true);
    const plan::StepReport planned = run(job, false), measured = run(job, true, planned.steps);
    CHECK(planned.peak == measured.peak);
    CHECK(planned.reserved == measured.reserved);
    CHECK(planned.peak == fixed.peak);  // the mode moves no allocated byte
    CHECK(planned.reserved - planned.peak <= 2 * MiB + int64_t(memory::kExpandablePage));
    CHECK(planned.reserved % int64_t(memory::kExpandablePage) == 0);  // whole pages are mapped
    MESSAGE(std::string(job.name) << ": allocated peak " << planned.peak << " B; reserved - allocated: default "
                                  << fixed.reserved - fixed.peak << " B, expandable " << planned.reserved - planned.peak
                                  << " B");
  }
}
