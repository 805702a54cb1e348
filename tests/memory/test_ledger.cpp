// The ledger on a real training step of a 3-layer MLP (tests/memory/mlp.h): every category at
// the end of forward, backward and the optimizer step, written out by hand; categories summing
// to the allocated bytes after every event; and the meta device matching cpu to the byte.
#include <doctest/doctest.h>

#include <numeric>

#include "mlp.h"

using namespace mg;

namespace {

constexpr int64_t kBatch = 64;
constexpr int64_t F = 4;  // float32 bytes

int64_t sum(const CategoryBytes& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); }

// Category bytes gained between two moments.
int64_t delta(const MemoryStats& later, const MemoryStats& earlier, Category c) {
  return later.category(c) - earlier.category(c);
}

}  // namespace

TEST_CASE("ledger: a 3-layer MLP training step, category by category") {
  using namespace mlp;
  const int64_t params = F * (kHidden * kIn + kHidden + kHidden * kHidden + kHidden + kClasses * kHidden + kClasses);
  // The same figure from the tensors themselves: sum of numel x dtype size.
  int64_t from_tensors = 0;
  for (auto& [name, p] : make(kCPU).params) from_tensors += p.numel() * int64_t(p.element_size());
  REQUIRE(params == from_tensors);
  REQUIRE(params % 512 == 0);

  Marks m = train_step(kCPU, kBatch);
  const MemoryStats &s0 = m.start, &f = m.after_forward, &b = m.after_backward, &u = m.after_update;

  // End of forward. Saved for backward, by op:
  //   linear fc1: x (an Input: stays Input) | relu: its output a1 | linear fc2: a1 and fc2.weight
  //   (a Parameter: stays Parameter) | relu: a2 | linear fc3: a2, fc3.weight | cross_entropy: the
  //   logits and the target (Input) | mean = sum / count: the count (1 float) only, since the
  //   gradient w.r.t. the sum needs just the divisor and the count needs no gradient.
  const int64_t a1 = kBatch * kHidden * F, a2 = a1, logits = kBatch * kClasses * F, scalar = 512;
  CHECK(delta(f, s0, Category::Parameter) == params);
  CHECK(delta(f, s0, Category::Input) == kBatch * kIn * F + kBatch * 8);
  CHECK(delta(f, s0, Category::Activation) == a1 + a2 + logits + scalar);
  CHECK(delta(f, s0, Category::Temporary) == scalar);  // the loss
  CHECK(delta(f, s0, Category::Gradient) == 0);
  CHECK(delta(f, s0, Category::OptimizerState) == 0);
  CHECK(delta(f, s0, Category::Workspace) == 0);

  // End of backward: every parameter has a gradient of its own size; nothing is saved any more,
  // so a1 and a2 (still held by the test) are Temporary again.
  CHECK(delta(b, s0, Category::Gradient) == params);
  CHECK(delta(b, s0, Category::Activation) == 0);
  CHECK(delta(b, s0, Category::Temporary) == a1 + a2 + scalar);
  CHECK(delta(b, s0, Category::Parameter) == params);

  // After the optimizer step: one momentum buffer per parameter.
  CHECK(delta(u, s0, Category::OptimizerState) == params);
  CHECK(delta(u, s0, Category::Gradient) == params);
  CHECK(delta(u, s0, Category::Temporary) == a1 + a2 + scalar);

  for (const MemoryStats* s : {&s0, &f, &b, &u}) CHECK(sum(s->by_category) == s->allocated);
  CHECK(u.peak_allocated >= b.allocated);
  // Everything the step made is gone again.
  MemoryStats end = memory_stats(kCPU);
  CHECK(end.allocated == s0.allocated);
  CHECK(end.by_category == s0.by_category);
}

TEST_CASE("ledger: the categories sum to the allocated bytes after every event of a step") {
  record_history(true, 1 << 20);
  mlp::train_step(kCPU, kBatch);
  auto events = memory_history();
  record_history(false);
  size_t checked = 0;
  for (auto& e : events) {
    if (e.device != kCPU) continue;
    ++checked;
    REQUIRE_MESSAGE(sum(e.by_category) == e.allocated, event_kind_name(e.kind), " of ", e.op, " for ", e.owner);
  }
  CHECK(checked > 50);
}

TEST_CASE("ledger: owners, and a saved parameter stays a Parameter") {
  using namespace mlp;
  MemoryStats s0 = memory_stats(kCPU);
  Model m = make(kCPU);
  auto owners = memory_by_owner(kCPU);
  CHECK(owners.at("fc1.weight") == kHidden * kIn * F);
  CHECK(owners.at("fc3.bias") == kClasses * F);
  Tensor x = randn({kBatch, kIn});
  Tensor h = linear(x, param(m, 0), param(m, 1));  // saves x and fc1.weight? x needs no grad: only x
  Tensor y = linear(relu(h), param(m, 2));         // saves relu's output and fc2.weight
  MemoryStats s = memory_stats(kCPU);
  CHECK(delta(s, s0, Category::Parameter) ==
        F * (kHidden * kIn + kHidden + kHidden * kHidden + kHidden + kClasses * kHidden + kClasses));
  CHECK(delta(s, s0, Category::Activation) == kBatch * kHidden * F);  // relu(h)
  CHECK(delta(s, s0, Category::Input) == kBatch * kIn * F);
  CHECK(delta(s, s0, Category::Temporary) == 2 * kBatch * kHidden * F);  // h and y
  y = Tensor();  // the graph goes: relu's output is freed, nothing is an Activation any more
  CHECK(delta(memory_stats(kCPU), s0, Category::Activation) == 0);
}

TEST_CASE("meta device: a training step fills the ledger exactly as on cpu") {
  auto run = [](const Device& d) {
    empty_cache(d);
    reset_peak(d);
    mlp::Marks m = mlp::train_step(d, kBatch);
    MemoryStats end = memory_stats(d);
    return std::make_pair(m, end);
  };
  auto [cpu, cpu_end] = run(kCPU);
  auto [meta, meta_end] = run(kMeta);
  REQUIRE(cpu.start.allocated == meta.start.allocated);  // both start empty
  CHECK(cpu_end.peak_allocated == meta_end.peak_allocated);
  CHECK(cpu_end.peak_requested == meta_end.peak_requested);
  for (int c = 0; c < kNumCategories; ++c) {
    CAPTURE(category_name(Category(c)));
    CHECK(cpu_end.peak_by_category[size_t(c)] == meta_end.peak_by_category[size_t(c)]);
    CHECK(cpu_end.at_peak_by_category[size_t(c)] == meta_end.at_peak_by_category[size_t(c)]);
    CHECK(cpu.after_forward.by_category[size_t(c)] == meta.after_forward.by_category[size_t(c)]);
    CHECK(cpu.after_backward.by_category[size_t(c)] == meta.after_backward.by_category[size_t(c)]);
  }
  CHECK(cpu_end.at_peak_by_owner == meta_end.at_peak_by_owner);
  CHECK(cpu_end.num_allocs - cpu.start.num_allocs == meta_end.num_allocs - meta.start.num_allocs);
  CHECK(cpu_end.peak_allocated > cpu.after_forward.allocated);  // the peak is in backward or the update
}

TEST_CASE("ledger: a .grad buffer is owned by '<parameter>.grad'") {
  Tensor w;
  {
    MemoryScope scope(Category::Parameter, "probe.weight");
    w = ones({128, 8}).requires_grad_();  // 4096 bytes
  }
  (w * 3.0).sum().backward();
  auto owners = memory_by_owner();
  REQUIRE(owners.count("probe.weight.grad"));
  CHECK(owners.at("probe.weight.grad") == 4096);
  CHECK(w.grad().storage()->category() == Category::Gradient);
}

TEST_CASE("ledger: what backward allocates is Temporary, never Input") {
  // masked_fill's backward makes its zero branch with zeros_like, and backward() makes the scalar
  // seed with ones: factories, which outside backward fall back to Input.
  Tensor x = randn({64, 64}).requires_grad_();
  Tensor mask = gt(randn({64, 64}), 0.0);
  Tensor loss = masked_fill(x * 2.0, mask, 0.0).sum();
  record_history(true);
  loss.backward();
  std::vector<MemoryEvent> events = memory_history();
  record_history(false);
  int64_t allocs = 0;
  for (const MemoryEvent& e : events) {
    if (e.kind != MemoryEventKind::Alloc) continue;
    ++allocs;
    CHECK_MESSAGE(e.category != Category::Input, "op '", e.op, "' allocated ", e.bytes, " B as Input in backward");
  }
  CHECK(allocs > 0);
  {
    MemoryScope caller(Category::Other);  // a category the caller sets still wins
    record_history(true);
    (x * 2.0).sum().backward();
    events = memory_history();
    record_history(false);
  }
  bool other = false;
  for (const MemoryEvent& e : events) other |= e.kind == MemoryEventKind::Alloc && e.category == Category::Other;
  CHECK(other);
}
