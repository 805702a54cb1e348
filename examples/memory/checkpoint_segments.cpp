// Recompute-on-backward ("activation checkpointing"): keep only a segment's input during forward
// and run the segment again during backward to get back what its ops saved. It trades Activation
// bytes for extra forward FLOPs; the gradients are bitwise the same.
//
// The model: n residual MLP blocks y = x + fc2(gelu(fc1(x))), width W, hidden 4W (a transformer's
// feed-forward half). With a = batch * W * 4 bytes (one float32 activation), what autograd saves:
//   fc1 saves its input x (the block input: the previous block's output)     -> a (Input for block 0)
//   gelu saves its input h = fc1(x)                                             -> 4a
//   fc2 saves its input g = gelu(h)                                             -> 4a
//   the residual add saves nothing; mse_loss against zeros saves d = y - 0 (a).
// So a plain forward holds 9a per block. checkpoint_sequential(k) keeps, for each of the first k-1
// segments, only its input, and runs the last segment normally:
//   Activation after forward = (k - 1) a + 9 (n / k) a.
//
//   checkpoint_segments [batch] [width] [blocks]     defaults: 256 64 8
#include <cstdlib>
#include <functional>
#include <vector>

#include "ledger.h"

namespace {

struct Block {
  std::shared_ptr<mg::nn::Linear> fc1, fc2;
  mg::Tensor operator()(const mg::Tensor& x) const { return x + (*fc2)(mg::gelu((*fc1)(x))); }
};

struct Result {
  int64_t after_forward = 0, activation_peak = 0, step_peak = 0;
  std::vector<std::vector<float>> grads;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 256, width = argc > 2 ? std::atoll(argv[2]) : 64,
                n = argc > 3 ? std::atoll(argv[3]) : 8;
  mg::manual_seed(0);
  std::vector<Block> blocks;
  for (int64_t i = 0; i < n; ++i) {
    mg::MemoryScope scope("block" + std::to_string(i));  // owner labels of the parameters
    blocks.push_back(
        {std::make_shared<mg::nn::Linear>(width, 4 * width), std::make_shared<mg::nn::Linear>(4 * width, width)});
  }
  std::vector<std::function<mg::Tensor(const mg::Tensor&)>> stages(blocks.begin(), blocks.end());
  mg::Tensor x = mg::randn({batch, width}), target = mg::zeros({batch, width});

  // One forward + backward; `forward` decides how the blocks run.
  auto run = [&](const std::function<mg::Tensor(const mg::Tensor&)>& forward) {
    Result r;
    for (auto& b : blocks)
      for (auto* l : {b.fc1.get(), b.fc2.get()}) l->zero_grad();
    const int64_t before = demo::now(mg::Category::Activation), allocated = mg::memory_stats().allocated;
    mg::reset_peak();
    mg::Tensor loss = mg::mse_loss(forward(x), target);
    r.after_forward = demo::now(mg::Category::Activation) - before;
    loss.backward();
    r.activation_peak = demo::peak(mg::Category::Activation) - before;
    r.step_peak = mg::memory_stats().peak_allocated - allocated;
    for (auto& b : blocks) r.grads.push_back(b.fc1->weight.grad().to_vector<float>());
    return r;
  };
  auto plain = [&](const mg::Tensor& in) {
    mg::Tensor h = in;
    for (auto& b : blocks) h = b(h);
    return h;
  };

  const int64_t a = batch * width * 4;
  std::printf("%lld blocks of y = x + fc2(gelu(fc1(x))), batch %lld, width %lld: a = %lld B per activation\n\n",
              (long long)n, (long long)batch, (long long)width, (long long)a);
  std::printf("%-36s %16s %16s %16s\n", "schedule", "Activation held", "Activation peak", "step peak");
  std::printf("%-36s %16s %16s %16s\n", "", "after forward", "(fwd + bwd)", "(all categories)");

  struct Row {
    std::string name;
    std::function<mg::Tensor(const mg::Tensor&)> forward;
    int64_t expected;  // Activation held after forward, by hand
  };
  std::vector<Row> rows{{"none", plain, 9 * n * a}};
  for (int64_t k : {int64_t(2), int64_t(4), n}) {
    if (k > n || n % k || k == 1) continue;
    rows.push_back({"checkpoint_sequential(" + std::to_string(k) + " segments)",
                    [&, k](const mg::Tensor& in) { return mg::checkpoint_sequential(stages, k, in); },
                    (k - 1) * a + 9 * (n / k) * a});
  }
  // mg::checkpoint around every block, the last included: only the block inputs stay, (n - 1) a
  // (block 0's input is the user's x, an Input), plus d.
  rows.push_back({"checkpoint(block) for every block",
                  [&](const mg::Tensor& in) {
                    mg::Tensor h = in;
                    for (auto& b : blocks) h = mg::checkpoint(b, h);
                    return h;
                  },
                  (n - 1) * a + a});
  // Selective: keep what the matmuls saved (x and g), recompute only gelu's input h (4a a block).
  rows.push_back({"checkpoint(block, keep_matmuls())",
                  [&](const mg::Tensor& in) {
                    mg::Tensor h = in;
                    for (auto& b : blocks) h = mg::checkpoint(b, h, mg::CheckpointPolicy::keep_matmuls());
                    return h;
                  },
                  (n - 1) * a + 4 * n * a + a});

  std::vector<Result> results;
  for (auto& row : rows) {
    results.push_back(run(row.forward));
    const Result& r = results.back();
    std::printf("%-36s %16lld %16lld %16lld\n", row.name.c_str(), (long long)r.after_forward,
                (long long)r.activation_peak, (long long)r.step_peak);
  }
  std::printf("\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    demo::check_bytes(results[i].after_forward, rows[i].expected, rows[i].name + ", Activation after forward");
    if (i > 0) demo::check(results[i].grads == results[0].grads, rows[i].name + ": gradients bitwise equal to none");
  }
  demo::check(results[1].after_forward < results[0].after_forward && results[1].step_peak < results[0].step_peak,
              "checkpointing lowers the held activations and the step's peak");
  return demo::exit_code();
}
