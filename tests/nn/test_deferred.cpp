// Deferred initialization (nn/deferred.h): a model built under DeferredInit holds placeholders (no
// bytes anywhere), advances the generator as the model built whole does, and materializes, whole or
// any range at a time, in float32 or converted to half, the same values to the bit.
#include <doctest/doctest.h>

#include <memgrad/memgrad.h>
#include <memgrad/nn/deferred.h>

using namespace mg;

namespace {
nn::GPTConfig config() {
  nn::GPTConfig c;
  c.vocab_size = 97, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  return c;
}
}  // namespace

TEST_CASE("deferred init: placeholders, then every parameter's values as the model built whole, to the bit") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) {
    INFO(dtype);
    manual_seed(5);
    nn::GPT whole(config());
    const uint64_t offset = default_generator().offset();
    if (dtype != kFloat32) whole.to(dtype);

    manual_seed(5);
    const MemoryStats before = memory_stats(kMeta);
    auto deferred = std::make_shared<nn::DeferredParameters>(kCPU);
    std::shared_ptr<nn::GPT> lazy;
    {
      nn::DeferredInit init(deferred);
      lazy = std::make_shared<nn::GPT>(config());
    }
    CHECK(default_generator().offset() == offset);             // the fills drew what the whole model's drew
    CHECK(memory_stats(kMeta).allocated == before.allocated);  // placeholders: no bytes in any ledger
    CHECK(lazy->deferred_parameters() == deferred);
    if (dtype != kFloat32) lazy->to(dtype);
    const nn::NamedTensors w = whole.named_parameters(), l = lazy->named_parameters();
    REQUIRE(w.size() == l.size());
    for (size_t i = 0; i < w.size(); ++i) {
      INFO(w[i].first);
      REQUIRE(nn::is_placeholder(l[i].second));
      CHECK(l[i].second.dtype() == dtype);
      // A range from the middle, then the whole parameter.
      const int64_t n = w[i].second.numel(), first = n / 3, count = std::max<int64_t>(1, n / 2 - first);
      Tensor piece = empty({count}, TensorOptions(dtype));
      deferred->materialize(l[i].second, piece, first);
      CHECK(equal(piece, w[i].second.reshape({-1}).narrow(0, first, count)));
      deferred->materialize(l[i].second, l[i].first);
      CHECK_FALSE(nn::is_placeholder(l[i].second));
      CHECK(equal(l[i].second, w[i].second));
    }
  }
}

TEST_CASE("deferred init: a placeholder without a recipe, or filled outside DeferredInit, is refused") {
  auto deferred = std::make_shared<nn::DeferredParameters>(kCPU);
  Tensor p = nn::placeholder({4}, kFloat32);
  CHECK_THROWS_AS(deferred->materialize(p, empty({4}), 0), ValueError);
  CHECK_THROWS_AS(nn::init::normal_(p), ValueError);
  {
    nn::DeferredInit init(deferred);
    nn::init::normal_(p);
  }
  CHECK_THROWS_AS(deferred->materialize(p, empty({3}), 2), ValueError);  // past its end
  deferred->materialize(p, "p");
  CHECK(p.device().is_cpu());
}
