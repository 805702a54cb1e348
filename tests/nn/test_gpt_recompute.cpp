// The GPT's checkpoint policies: same loss and gradients as a plain run (bitwise on CPU, with
// dropout), fewer Activation bytes held at the end of forward.
#include <doctest/doctest.h>

#include <memgrad/memgrad.h>

using namespace mg;

namespace {
struct Result {
  double loss;
  int64_t activation_after_forward;
  std::vector<std::vector<float>> grads;
};

Result run(int64_t checkpoint_every, bool selective) {
  manual_seed(21);
  nn::GPTConfig c;
  c.vocab_size = 40;
  c.block_size = 16;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 32;
  c.dropout = 0.1;
  c.checkpoint_every = checkpoint_every;
  c.selective_recompute = selective;
  nn::GPT model(c);
  Tensor idx = randint(0, 40, {3, 16}), tgt = randint(0, 40, {3, 16});
  int64_t before = memory_stats().category(Category::Activation);
  Tensor loss = model.loss(idx, tgt);
  Result r{loss.item<double>(), memory_stats().category(Category::Activation) - before, {}};
  loss.backward();
  for (auto& p : model.parameters()) r.grads.push_back(p.grad().to_vector<float>());
  return r;
}
}  // namespace

TEST_CASE("GPT checkpoint policies give the same numbers and hold fewer activations") {
  Result none = run(0, false), every = run(1, false), pairs = run(2, false), selective = run(0, true);
  for (const Result* r : {&every, &pairs, &selective}) {
    CHECK(r->loss == none.loss);
    CHECK(r->grads == none.grads);
  }
  // Every segment keeps only its input, the residual stream [3, 16, 32] float32 = 6144 bytes:
  // one segment per block keeps 4 of them, one per two blocks keeps 2.
  CHECK(every.activation_after_forward - pairs.activation_after_forward == 2 * 3 * 16 * 32 * 4);
  CHECK(every.activation_after_forward < none.activation_after_forward);
  // Selective keeps the matmul inputs but drops each block's two [3, 2, 16, 16] attention maps
  // (softmax output and dropout output, 6144 bytes each): a saving of 4 blocks x 2 x 6144 bytes.
  CHECK(none.activation_after_forward - selective.activation_after_forward >= 4 * 2 * 6144);
  CHECK(selective.activation_after_forward > every.activation_after_forward);
}
