// Evaluation under NoGradGuard. With grad mode on, every op whose input requires grad records a
// node and saves what its backward needs, even if backward never runs: a forward pass for
// evaluation then holds a training step's activations until its output is dropped. NoGradGuard
// records nothing, so each intermediate is freed as soon as the next op has consumed it.
// model.eval() is a different switch: it turns dropout off; it does not stop recording.
//
// The model: fc1 (256 -> 1024), ReLU, fc2 (1024 -> 1024), ReLU, fc3 (1024 -> 10), batch 128. With
// h = 128 x 1024 x 4 bytes (one hidden activation), by hand:
//   recording: relu1 and relu2 save their outputs (fc2 and fc3 save the same tensors, and fc1's
//              input is the user's x, an Input): Activation = 2h. The peak is at relu2, when
//              relu1's output (saved), fc2's output and relu2's output are alive: 3h.
//   NoGradGuard: nothing saved; the peak is a linear output and its relu output together: 2h.
//
//   no_grad_eval [batch]     default 128
#include <cstdlib>

#include "ledger.h"

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 128, hidden = 1024;
  mg::manual_seed(0);
  mg::nn::Sequential model;
  model.emplace_back<mg::nn::Linear>(256, hidden);
  model.emplace_back<mg::nn::ReLU>();
  model.emplace_back<mg::nn::Linear>(hidden, hidden);
  model.emplace_back<mg::nn::ReLU>();
  model.emplace_back<mg::nn::Linear>(hidden, 10);
  mg::Tensor x = mg::randn({batch, 256});

  struct Row {
    const char* name;
    int64_t activation, peak;
  };
  auto evaluate = [&](const char* name, bool no_grad) {
    const int64_t before = mg::memory_stats().allocated;
    mg::reset_peak();
    mg::Tensor logits;
    {
      std::unique_ptr<mg::NoGradGuard> guard;
      if (no_grad) guard = std::make_unique<mg::NoGradGuard>();
      logits = model(x);
    }
    // While `logits` lives, so does its graph and everything the graph saved.
    return Row{name, demo::now(mg::Category::Activation), mg::memory_stats().peak_allocated - before};
  };
  model.train();
  Row train = evaluate("train(), grad on", false);
  model.eval();
  Row eval = evaluate("eval(), grad on", false);
  Row guarded = evaluate("eval(), NoGradGuard", true);

  const int64_t h = batch * hidden * 4;
  std::printf("batch %lld: one hidden activation h = %lld B\n\n", (long long)batch, (long long)h);
  std::printf("%-22s %18s %18s\n", "forward pass", "Activation held", "forward peak");
  for (const Row& r : {train, eval, guarded})
    std::printf("%-22s %18lld %18lld\n", r.name, (long long)r.activation, (long long)r.peak);
  std::printf("(forward peak: all categories, above what was allocated before the pass)\n\n");

  demo::check_bytes(train.activation, 2 * h, "grad on: relu1 and relu2 outputs saved");
  demo::check_bytes(eval.activation, 2 * h, "eval() alone saves the same (it only switches dropout)");
  demo::check_bytes(guarded.activation, 0, "NoGradGuard: nothing saved");
  demo::check_bytes(train.peak, 3 * h, "grad on: forward peak");
  demo::check_bytes(guarded.peak, 2 * h, "NoGradGuard: forward peak");
  return demo::exit_code();
}
