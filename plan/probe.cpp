// The planner's probe of a chain (probe_impl.h): the peak of each phase of a step, marked from
// inside the chain's run and from gradient hooks.
#include <memgrad/plan/probe_impl.h>

#include <memgrad/autograd/checkpoint.h>
#include <memgrad/core/error.h>
#include <memgrad/core/flops.h>

namespace mg::plan::detail {

namespace {
int64_t rounded_bytes(const Tensor& t) {
  return (t.numel() * int64_t(dtype_size(t.dtype())) + kGranule - 1) / kGranule * kGranule;
}
}  // namespace

int64_t ChainProbe::mark() {
  const int64_t v = memory_stats(kMeta).peak_allocated;
  reset_peak(kMeta);
  return v;
}

// The hook on block i's output closes the phase before block i's backward: block i + 1's backward
// (with its recompute, in a segment), or the tail for the last block.
void ChainProbe::close_before(Tensor& out, int64_t i) {
  out.register_hook([this, i](const Tensor&) {
    close(i + 1 == phases.n ? phases.tail : phases.backward[size_t(i + 1)]);
    return Tensor();
  });
}

Tensor ChainProbe::run(const train::Chain& chain, const Tensor& x) {
  Phases& p = phases;
  const int64_t n = chain.n;
  MG_CHECK(n >= 1 && (p.n == 0 || p.n == n), ValueError,
           "plan: expected one chain of blocks per forward, got chains of ", p.n, " and ", n, " blocks");
  if (p.n == 0) {
    p.n = n;
    p.forward.assign(size_t(n), 0), p.backward.assign(size_t(n), 0), p.recompute.assign(size_t(n), 0);
  }
  close(p.head);
  p.input_bytes = rounded_bytes(x);
  Tensor h = x;
  if (h.requires_grad()) {
    p.backward0_hooked = true;
    h.register_hook([this](const Tensor&) {
      close(phases.backward[0]);
      return Tensor();
    });
  }
  if (!one_segment_) {
    const int64_t before = memory_stats(kMeta).allocated;
    for (int64_t i = 0; i < n; ++i) {
      FlopCounter flops;
      h = chain.block(i, h, false);
      if (i == 0) p.forward_flops = flops.total();
      close(p.forward[size_t(i)]);
      if (i == 0) p.block_bytes = memory_stats(kMeta).allocated - before;
      close_before(h, i);
    }
    p.output_bytes = rounded_bytes(h);
    return h;
  }
  auto calls = std::make_shared<int>(0);  // the segment's runs: the forward, then its recompute in backward
  auto block = chain.block;
  return checkpoint(
      [this, block, n, calls](const Tensor& in) {
        const bool first = ++*calls == 1;
        Tensor y = in;
        for (int64_t j = 0; j < n; ++j) {
          y = block(j, y, false);
          close((first ? phases.forward : phases.recompute)[size_t(j)]);
          if (first) close_before(y, j);
        }
        return y;
      },
      h);
}

}  // namespace mg::plan::detail
