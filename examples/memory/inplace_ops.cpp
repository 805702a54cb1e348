// In-place ops (relu_, add_, mul_, ...) write their result into their input's storage instead of a
// new tensor. What they save is a transient buffer: the output of an out-of-place op and its input
// are alive together for a moment; in place, only one is. They do not shrink what autograd saves:
// relu_ under autograd saves its output just as relu does. And they are checked: modifying a
// tensor that autograd saved raises an error at backward instead of computing a wrong gradient.
//
// The chain: 4 layers of Linear(256, 256) then ReLU, batch 64; a = 64 x 256 x 4 bytes. By hand
// (bytes above what was allocated before the forward; the input x is held throughout):
//   relu(linear(h)), no grad:   linear's output z, relu's output and the previous h: 3a at the peak
//   linear(h).relu_(), no grad: z and the previous h: 2a
//   with autograd, relu saves its output (one a per layer, 4a held): the peak is the saved outputs
//   of the layers before, plus z and relu's output of the last layer: 5a out of place, 4a in place.
//
//   inplace_ops      (no arguments)
#include <string>
#include <vector>

#include "ledger.h"

int main() {
  const int64_t batch = 64, width = 256, layers = 4, a = batch * width * 4;
  mg::manual_seed(0);
  std::vector<std::shared_ptr<mg::nn::Linear>> fc;
  for (int64_t i = 0; i < layers; ++i) fc.push_back(std::make_shared<mg::nn::Linear>(width, width));
  mg::Tensor x = mg::randn({batch, width});

  // 1. One op on its own, no autograd: y = x + y allocates a result, add_ does not.
  {
    mg::NoGradGuard no_grad;
    mg::Tensor y = mg::randn({batch, width});
    int64_t before = mg::memory_stats().allocated;
    mg::Tensor z = x + y;
    const int64_t out_of_place = mg::memory_stats().allocated - before;
    z = mg::Tensor();
    before = mg::memory_stats().allocated;
    y.add_(x);
    const int64_t in_place = mg::memory_stats().allocated - before;
    std::printf("x + y allocates %lld B; y.add_(x) allocates %lld B\n\n", (long long)out_of_place, (long long)in_place);
    demo::check_bytes(out_of_place, a, "x + y: a new 64 x 256 float32 tensor");
    demo::check_bytes(in_place, 0, "y.add_(x): nothing");
  }

  // 2. The chain, out of place and in place, with and without autograd.
  struct Row {
    std::string name;
    int64_t held, peak, expected_peak;
  };
  auto run = [&](bool in_place, bool grad) {
    std::unique_ptr<mg::NoGradGuard> guard;
    if (!grad) guard = std::make_unique<mg::NoGradGuard>();
    const int64_t before = mg::memory_stats().allocated, act = demo::now(mg::Category::Activation);
    mg::reset_peak();
    mg::Tensor h = x;
    for (auto& l : fc) {
      if (in_place) {
        h = (*l)(h);
        h.relu_();
      } else {
        h = mg::relu((*l)(h));
      }
    }
    const int64_t peak = mg::memory_stats().peak_allocated - before;
    const int64_t expected = grad ? (in_place ? layers * a : (layers + 1) * a) : (in_place ? 2 * a : 3 * a);
    return Row{std::string(grad ? "autograd: " : "no grad:  ") + (in_place ? "linear(h).relu_()" : "relu(linear(h))"),
               demo::now(mg::Category::Activation) - act, peak, expected};
  };
  std::printf("%-32s %16s %14s\n", "4 x Linear(256, 256) + ReLU", "Activation held", "forward peak");
  std::vector<Row> rows{run(false, false), run(true, false), run(false, true), run(true, true)};
  for (const Row& r : rows) std::printf("%-32s %16lld %14lld\n", r.name.c_str(), (long long)r.held, (long long)r.peak);
  std::printf("\n");
  for (const Row& r : rows) demo::check_bytes(r.peak, r.expected_peak, r.name + ", forward peak");
  demo::check_bytes(rows[2].held, layers * a, "autograd, relu: one saved output per layer");
  demo::check_bytes(rows[3].held, layers * a, "autograd, relu_: the same bytes saved");

  // 3. In place on a saved tensor: caught at backward.
  mg::Tensor w = mg::randn({width, width}).requires_grad_();
  mg::Tensor s = mg::sigmoid(mg::matmul(x, w));  // sigmoid saves its output s
  s.mul_(2.0);                                   // ... which this changes
  std::string error;
  try {
    s.sum().backward();
  } catch (const mg::Error& e) {
    error = e.what();
  }
  std::printf("\nsigmoid's saved output modified by mul_, then backward:\n  %s\n\n", error.c_str());
  demo::check(!error.empty(), "modifying a saved tensor in place raises at backward");
  return demo::exit_code();
}
