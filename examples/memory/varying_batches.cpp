// Batches of varying size: a small batch A, then a big batch B, runs out of memory under a limit
// that B then A runs under (PyTorch issue #1529); why; and expandable segments, which run it.
//
// An MLP (Linear(W, W) + ReLU blocks, AdamW) takes one step on A, then one on B. A's step carves 20 MiB
// segments for its activations, and the blocks that outlive the step (AdamW's state, made after
// backward) land in the holes those activations leave: once the step ends, the segments hold holes
// that no block of B fits, pinned by blocks that stay. B needs new segments, and the limit (A then
// B's allocated peak + 2 MiB + one page) has no room for them. The OutOfMemoryError's forensics say
// so: the holes by size, the largest, and the blocks that split them. (B then A runs under the same
// limit: B's step allocates less, AdamW's state coming after its activations are gone, and A's small
// blocks reuse B's segments.) With expandable segments the allocator unmaps the whole free pages of
// the holes and maps them again where B needs them, so A then B runs. Every run is repeated on meta,
// which must allocate, reserve and fail exactly as the CPU.
//
//   varying_batches [width=1024] [layers=4] [A=768] [B=4096]
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "ledger.h"

namespace {

constexpr int64_t MiB = int64_t(1) << 20;

struct Run {
  int64_t allocated_peak = 0, reserved_peak = 0;
  std::optional<mg::OutOfMemoryError> oom;  // the first one, with the batch it failed in
  int64_t failed_batch = 0;
};

// One AdamW step per batch size in `batches`, in a fresh allocator on `d` under `limit` (0: none).
Run train(const mg::Device& d, int64_t width, int64_t layers, const std::vector<int64_t>& batches, int64_t limit,
          bool expandable) {
  mg::set_allocator_config(expandable ? "expandable_segments:True" : "expandable_segments:False");
  Run r;
  {
    mg::IsolatedAllocator fresh(d, limit);
    mg::manual_seed(0);
    const mg::TensorOptions on = mg::TensorOptions().device(d);
    mg::nn::Sequential net;
    for (int64_t i = 0; i < layers; ++i) {
      net.emplace_back<mg::nn::Linear>(width, width, true, on);
      net.emplace_back<mg::nn::ReLU>();
    }
    mg::optim::AdamW optimizer(net.named_parameters());
    for (int64_t batch : batches) {
      try {
        mg::Tensor x, target;
        {
          mg::MemoryScope input(mg::Category::Input, "batch");
          x = mg::randn({batch, width}, on), target = mg::zeros({batch, width}, on);
        }
        optimizer.zero_grad();
        mg::mse_loss(net(x), target).backward();
        optimizer.step();
      } catch (const mg::OutOfMemoryError& e) {
        r.oom = e;
        r.failed_batch = batch;
        break;
      }
    }
    const mg::MemoryStats s = mg::memory_stats(d);
    r.allocated_peak = s.peak_allocated, r.reserved_peak = s.peak_reserved;
  }
  mg::set_allocator_config("expandable_segments:False");
  return r;
}

std::string order(const std::vector<int64_t>& batches) {
  std::string s;
  for (int64_t b : batches) s += (s.empty() ? "" : " then ") + std::to_string(b);
  return s;
}

void row(const char* what, const std::vector<int64_t>& batches, int64_t limit, const Run& r) {
  std::printf("%-22s %-14s %-20s %14lld %14lld   %s\n", what, order(batches).c_str(),
              limit ? (std::to_string(limit) + " B").c_str() : "none", (long long)r.allocated_peak,
              (long long)r.reserved_peak,
              r.oom ? ("out of memory in batch " + std::to_string(r.failed_batch)).c_str() : "ran");
}

}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, int64_t fallback) { return argc > i ? std::atoll(argv[i]) : fallback; };
  const int64_t width = arg(1, 1024), layers = arg(2, 4), a = arg(3, 768), b = arg(4, 4096);
  const std::vector<int64_t> ab{a, b}, ba{b, a};
  auto cpu_and_meta = [&](const std::vector<int64_t>& batches, int64_t limit, bool expandable) {
    const Run cpu = train(mg::kCPU, width, layers, batches, limit, expandable),
              meta = train(mg::kMeta, width, layers, batches, limit, expandable);
    demo::check(cpu.reserved_peak == meta.reserved_peak && cpu.allocated_peak == meta.allocated_peak &&
                    cpu.failed_batch == meta.failed_batch,
                "meta allocates, reserves and fails as the CPU: " + order(batches) +
                    (expandable ? ", expandable segments" : ", default") + (limit ? ", under the limit" : ""));
    return cpu;
  };

  const Run expandable_free = cpu_and_meta(ab, 0, true), default_free = cpu_and_meta(ab, 0, false);
  // The limit: A then B's allocated peak, plus the 2 MiB + one page expandable segments may round up to.
  const int64_t limit = expandable_free.allocated_peak + 2 * MiB + int64_t(mg::memory::kExpandablePage);
  const Run ab_default = cpu_and_meta(ab, limit, false), ab_expandable = cpu_and_meta(ab, limit, true),
            ba_default = cpu_and_meta(ba, limit, false);
  std::printf("\nMLP of %lld Linear(%lld, %lld) + ReLU blocks, AdamW; batches A = %lld and B = %lld rows\n\n",
              (long long)layers, (long long)width, (long long)width, (long long)a, (long long)b);
  std::printf("%-22s %-14s %-20s %14s %14s\n", "allocator", "batches", "memory limit", "allocated peak",
              "reserved peak");
  row("expandable segments", ab, 0, expandable_free);
  row("default", ab, 0, default_free);
  row("default", ab, limit, ab_default);
  row("expandable segments", ab, limit, ab_expandable);
  row("default", ba, limit, ba_default);
  if (ab_default.oom)
    std::printf("\nThe failure, A then B with the default allocator:\n%s\n\n", ab_default.oom->what());
  for (const Run* r : {&ab_expandable, &ba_default})  // not expected
    if (r->oom) std::printf("\nUnexpected: %s\n\n", r->oom->what());

  demo::check(expandable_free.allocated_peak == default_free.allocated_peak,
              "without a limit both allocators allocate the same bytes");
  demo::check(default_free.reserved_peak > limit, "without a limit the default allocator reserves more than the limit");
  demo::check(ab_default.failed_batch == b,
              "under the limit, A then B runs out of memory in B with the default allocator");
  if (ab_default.oom) {
    const mg::Fragmentation& f = *ab_default.oom->fragmentation();
    demo::check(!f.fits_in_cache && !f.split_holes.empty() && !f.split_holes[0].pinning.empty(),
                "its forensics: no free block holds B's request; they name the live blocks that split the holes");
    demo::check(f.fits_expandable, "its forensics: it would fit with expandable segments");
  }
  demo::check(!ab_expandable.oom,
              "with expandable segments A then B runs under the limit (free pages unmapped "
              "where A's activations were, mapped again for B)");
  demo::check(!ba_default.oom, "B then A runs under the limit with the default allocator");
  return demo::exit_code();
}
