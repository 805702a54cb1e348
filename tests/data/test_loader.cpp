// The DataLoader: batches of token windows in the sampler's order, the same with any number of
// workers, resumed exactly from its position, split between processes like one process's
// micro-batches; its buffers in the ledger to the byte (and planned on meta); a failing read thrown
// in order and read again on the next call.
#include <doctest/doctest.h>

#include <atomic>
#include <numeric>

#include "expect_error.h"

using namespace mg;
using data::Batch;
using data::DataLoader;
using data::DataLoaderOptions;
using data::Position;

namespace {
// Tokens 0, 1, 2, ... (vocabulary n): window i holds i .. i + length - 1.
std::shared_ptr<const data::TokenWindows> counting(int64_t n, int64_t length, int64_t stride = 1) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  return std::make_shared<data::TokenWindows>(data::Tokens::from_ids(ids, n, "counting"), length, stride);
}

// The examples of the next `n` batches (an epoch's end read as a -1).
std::vector<int64_t> take(DataLoader& loader, int64_t n) {
  std::vector<int64_t> seen;
  for (int64_t i = 0; i < n; ++i) {
    std::optional<Batch> b = loader.next();
    if (!b) {
      seen.push_back(-1);
      continue;
    }
    seen.insert(seen.end(), b->indices.begin(), b->indices.end());
  }
  return seen;
}

// A dataset whose reads of one example fail while `failures` > 0.
struct Flaky : data::Dataset {
  std::shared_ptr<const data::TokenWindows> inner = counting(100, 4);
  int64_t bad = 13;
  mutable std::atomic<int> failures{1};
  int64_t size() const override { return inner->size(); }
  data::Field data_field() const override { return inner->data_field(); }
  data::Field target_field() const override { return inner->target_field(); }
  void read(int64_t index, void* d, void* t) const override {
    if (index == bad && failures-- > 0) throw IOError("example 13: the disk is unplugged");
    inner->read(index, d, t);
  }
};
}  // namespace

TEST_CASE("data: token windows are a window and the window one token later") {
  auto w = counting(10, 4, 3);  // windows at 0, 3 (a window needs the token after it: 6 + 4 = 10 > 9)
  CHECK(w->size() == 2);
  data::Example e = w->get(1);
  CHECK(e.data.to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5, 6});
  CHECK(e.target.to_vector<int64_t>() == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(counting(10, 9)->size() == 1);
  expect_error<ValueError>([] { counting(10, 10); }, {"a window of 10 tokens and the token after it (11) is longer",
                                                      "than the 10 tokens of counting"});
  expect_error<IndexError>([&] { w->get(2); }, {"example 2 of 2"});
}

TEST_CASE("data: batches in the sampler's order, an epoch's end, drop_last") {
  auto w = counting(12, 2);  // 10 windows
  DataLoader loader(w, nullptr, DataLoaderOptions(4));
  CHECK(loader.batches_per_epoch() == 3);
  std::optional<Batch> b = loader.next();
  REQUIRE(b);
  CHECK(b->data.shape() == Shape{4, 2});
  CHECK(b->data.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1, 2, 2, 3, 3, 4});
  CHECK(b->target.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 2, 3, 3, 4, 4, 5});
  CHECK(take(loader, 4) == std::vector<int64_t>{4, 5, 6, 7, 8, 9, -1, 0, 1, 2, 3});  // the short last batch: 2 rows
  int64_t batches = 0;
  for (Batch& x : loader) batches += x.data.size(0) > 0;  // the rest of epoch 1
  CHECK(batches == 2);

  DataLoader dropping(w, nullptr, DataLoaderOptions(4).drop_last());
  CHECK(dropping.batches_per_epoch() == 2);
  CHECK(take(dropping, 4) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, -1, 0, 1, 2, 3});
  expect_error<ValueError>([&] { DataLoader(w, nullptr, DataLoaderOptions(11).drop_last()); },
                           {"10 examples hold no full batch of 11"});
}

TEST_CASE("data: the same batches with 0, 1, 2 or 3 workers and any prefetch") {
  auto w = counting(300, 5);
  auto shuffled = std::make_shared<data::ShuffledSampler>(w->size(), 9);
  DataLoader reference(w, shuffled, DataLoaderOptions(16));
  const std::vector<int64_t> want = take(reference, 60);  // over three epochs of 19 batches
  for (int64_t workers : {1, 2, 3})
    for (int64_t prefetch : {1, 2, 4}) {
      INFO(workers << " workers, prefetch " << prefetch);
      DataLoader loader(w, shuffled, DataLoaderOptions(16).num_workers(workers).prefetch(prefetch));
      CHECK(take(loader, 60) == want);
    }
}

TEST_CASE("data: a loader set to another's position goes on with the same batches") {
  auto w = counting(200, 3);
  auto shuffled = std::make_shared<data::ShuffledSampler>(w->size(), 3);
  for (int64_t workers : {0, 2}) {
    INFO(workers << " workers");
    const DataLoaderOptions o = DataLoaderOptions(8).drop_last().num_workers(workers);
    DataLoader whole(w, shuffled, o);
    take(whole, 30);  // into epoch 1 (24 batches an epoch)
    const Position at = whole.position();
    CHECK(at == Position{1, 5 * 8});
    DataLoader resumed(w, shuffled, o);
    take(resumed, 3);  // read ahead, then set back
    resumed.set_position(at);
    CHECK(take(resumed, 40) == take(whole, 40));
    expect_error<ValueError>([&] { resumed.set_position({0, 3}); }, {"example 3 of epoch 0 does not start a batch"});
  }
}

TEST_CASE("data: shards of 2 processes with 2 micro-batches each see what one process sees") {
  auto w = counting(100, 4);
  auto shuffled = std::make_shared<data::ShuffledSampler>(w->size(), 5);
  const DataLoaderOptions o = DataLoaderOptions(4).drop_last().num_workers(1);
  DataLoader one(w, shuffled, o);
  DataLoader rank0(w, shuffled, DataLoaderOptions(o).shard(0, 2, 2));
  DataLoader rank1(w, shuffled, DataLoaderOptions(o).shard(1, 2, 2));
  std::vector<int64_t> shared, split;
  for (int64_t step = 0; step < 14; ++step) {  // 56 batches: over 2 epochs of 24
    for (int64_t i = 0; i < 4; ++i) {
      const Batch b = one.next_batch();
      shared.insert(shared.end(), b.indices.begin(), b.indices.end());
    }
    for (DataLoader* r : {&rank0, &rank0, &rank1, &rank1}) {
      const Batch b = r->next_batch();
      split.insert(split.end(), b.indices.begin(), b.indices.end());
    }
    CHECK(rank0.position() == one.position());  // after a step, every process is where one process is
    CHECK(rank1.position() == one.position());
  }
  CHECK(split == shared);
  DataLoader resumed(w, shuffled, DataLoaderOptions(o).shard(1, 2, 2));
  resumed.set_position(one.position());
  CHECK(take(resumed, 2) == take(rank1, 2));
}

TEST_CASE("data: the loader's buffers and batches in the ledger, to the byte, and on meta") {
  auto w = counting(1000, 64);
  const int64_t batch_bytes = 16 * 64 * 8;  // [16, 64] int64: a multiple of 512 B
  const DataLoaderOptions o = DataLoaderOptions(16).drop_last().num_workers(2).prefetch(3);
  const int64_t before = allocated();
  {
    DataLoader loader(w, nullptr, o);
    const int64_t held = loader.bytes().host;
    CHECK(held == 2 * 3 * 2 * batch_bytes);
    CHECK(loader.bytes().pinned == 0);
    CHECK(loader.bytes().staging == 0);
    CHECK(data::buffer_bytes(w->data_field(), w->target_field(), o).host == held);
    CHECK(allocated() - before == held);
    const MemoryStats m = memory_stats();
    CHECK(memory_by_owner().at("data.loader") == held);
    Batch b = loader.next_batch();
    CHECK(allocated() - before == held + 2 * batch_bytes);
    CHECK(memory_stats().category(Category::Input) - m.category(Category::Input) == 2 * batch_bytes);
    const int64_t meta_before = meta_allocated();
    auto planned = data::plan_buffers(w->data_field(), w->target_field(), o, kMeta);
    CHECK(meta_allocated() - meta_before == held);
    CHECK(memory_by_owner(kMeta).at("data.loader") == held);
    {
      MetaTargetGuard for_cuda(DeviceType::CUDA);  // on a cuda device the host buffers are not the device's
      CHECK(data::plan_buffers(w->data_field(), w->target_field(), o, kMeta).empty());
    }
  }
  CHECK(allocated() == before);
  CHECK(data::buffer_counts(DataLoaderOptions(4)).host == 0);  // no workers: nothing held between batches
  const data::BufferCounts pinned = data::buffer_counts(DataLoaderOptions(4).pin_memory().device(cuda_device(0)));
  CHECK(pinned.host == 1);
  CHECK(pinned.staging == 2);
  CHECK(pinned.pinned);
  // Rounded to the ledger's 512 B where a ledger counts them, exact where page-locked: [4, 3] int64 is 96 B.
  const data::BufferBytes b = data::buffer_bytes({{3}, kInt64}, {{3}, kInt64}, DataLoaderOptions(4).num_workers(1));
  CHECK(b.host == 2 * 2 * 512);
  const data::BufferBytes p =
      data::buffer_bytes({{3}, kInt64}, {{3}, kInt64}, DataLoaderOptions(4).pin_memory().device(cuda_device(0)));
  CHECK(p.host == 0);
  CHECK(p.pinned == 2 * 96);
  CHECK(p.staging == 2 * 2 * 512);
}

TEST_CASE("data: a read that fails is thrown in order, and read again on the next call") {
  for (int64_t workers : {0, 2}) {
    INFO(workers << " workers");
    auto flaky = std::make_shared<Flaky>();
    DataLoader loader(flaky, nullptr, DataLoaderOptions(4).num_workers(workers));
    CHECK(take(loader, 3) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    const Position at = loader.position();
    expect_error<IOError>([&] { loader.next(); }, {"example 13: the disk is unplugged"});
    CHECK(loader.position() == at);
    CHECK(take(loader, 1) == std::vector<int64_t>{12, 13, 14, 15});
  }
}

TEST_CASE("data: options out of range and pin_memory without cuda are refused") {
  auto w = counting(50, 4);
  expect_error<ValueError>([&] { DataLoader(w, nullptr, DataLoaderOptions(0)); }, {"batch size >= 1, got 0"});
  expect_error<ValueError>([&] { DataLoader(w, nullptr, DataLoaderOptions(2).num_workers(-1)); },
                           {"num_workers >= 0 and prefetch >= 1, got -1"});
  expect_error<ValueError>([&] { DataLoader(w, nullptr, DataLoaderOptions(2).shard(2, 2)); }, {"0 <= rank < replicas"});
  expect_error<ValueError>([&] { DataLoader(w, std::make_shared<data::SequentialSampler>(7), DataLoaderOptions(2)); },
                           {"the sampler orders 7 examples, the dataset holds 46"});
  expect_error<DeviceError>([&] { DataLoader(w, nullptr, DataLoaderOptions(2).pin_memory()); },
                            {"pin_memory page-locks host buffers for copies to a cuda device", "go to cpu"});
}

namespace {
// A user's program for the planner: a linear model trained on the loader's batches; on meta the
// loader is stood for by plan_buffers and zero batches (meta has no values).
plan::Program linear_program(std::shared_ptr<const data::TokenWindows> windows, DataLoaderOptions o) {
  return [windows, o](const plan::StepContext& ctx) -> plan::Step {
    auto held = std::make_shared<std::vector<data::Example>>();
    std::shared_ptr<DataLoader> loader;
    if (ctx.device.is_meta())
      *held = data::plan_buffers(windows->data_field(), windows->target_field(), o, ctx.device);
    else
      loader = std::make_shared<DataLoader>(windows, nullptr, DataLoaderOptions(o).device(ctx.device));
    auto fc = std::make_shared<nn::Linear>(windows->data_field().shape[0], 1, true, ctx.device);
    auto opt = std::make_shared<optim::AdamW>(fc->parameters());
    return [=] {
      (void)held;
      Tensor x, y;
      if (loader) {
        Batch b = loader->next_batch();
        x = b.data, y = b.target;
      } else {
        x = zeros({o.batch_size_, windows->data_field().shape[0]}, TensorOptions(kInt64).device(ctx.device));
        y = zeros({o.batch_size_, windows->data_field().shape[0]}, TensorOptions(kInt64).device(ctx.device));
      }
      opt->zero_grad();
      (fc->forward(x.to(kFloat32)).sum() * 0.0).backward();
      opt->step();
    };
  };
}
}  // namespace

TEST_CASE("data: a program that trains from a loader with workers: planned on meta equals measured") {
  auto w = counting(500, 32);
  const DataLoaderOptions o = DataLoaderOptions(8).drop_last().num_workers(2).prefetch(2);
  const plan::Program program = linear_program(w, o);
  plan::StepContext ctx;
  const plan::StepReport planned = plan::plan(program, ctx);
  plan::PlanOptions steps;
  steps.steps = planned.steps;
  ctx.device = kCPU;
  const plan::StepReport measured = plan::measure(program, ctx, steps);
  CHECK(planned.category(Category::Input) == measured.category(Category::Input));
  CHECK(planned.at_peak_by_owner.at("data.loader") == 2 * 2 * 2 * 8 * 32 * 8);
  CHECK(planned.peak == measured.peak);
  CHECK(planned.first_peak == measured.first_peak);
  CHECK(planned.reserved == measured.reserved);
}
