// Trains a small MLP on a synthetic three-arm spiral (fixed seed, nothing downloaded) with
// plain SGD, then prints where the memory went according to the ledger.
//
//   train_mlp [steps] [hidden]     defaults: 400 steps, 64 hidden units
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>

namespace {

struct Dataset {
  mg::Tensor x;  // [N, 2] float32
  mg::Tensor y;  // [N] int64 class indices
};

// `per_class` points on each of `classes` interleaved spiral arms, with a little angular noise.
Dataset make_spiral(int64_t per_class, int64_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.2f);
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t k = 0; k < classes; ++k)
    for (int64_t i = 0; i < per_class; ++i) {
      float r = float(i) / float(per_class);
      float theta = 4.f * float(k) + 4.f * r + noise(rng);
      xs.push_back(r * std::sin(theta));
      xs.push_back(r * std::cos(theta));
      ys.push_back(k);
    }
  int64_t n = per_class * classes;
  return {mg::tensor(xs, {n, 2}), mg::tensor(ys, {n})};
}

// A weight [out, in] with He initialisation and a zero bias, both leaves that require grad.
struct Layer {
  mg::Tensor weight, bias;
};

Layer make_layer(const std::string& name, int64_t in, int64_t out) {
  mg::MemoryScope scope(mg::Category::Parameter, name);
  Layer l{mg::randn({out, in}), mg::zeros({out})};
  l.weight.mul_(std::sqrt(2.0 / double(in)));
  l.weight.requires_grad_();
  l.bias.requires_grad_();
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 400;
  const int64_t hidden = argc > 2 ? std::atoll(argv[2]) : 64;
  const int64_t classes = 3;
  const double lr = 0.5;

  mg::manual_seed(0);
  Dataset data = make_spiral(100, classes, /*seed=*/42);
  std::vector<Layer> layers = {make_layer("fc1", 2, hidden), make_layer("fc2", hidden, hidden),
                               make_layer("fc3", hidden, classes)};

  auto forward = [&](const mg::Tensor& x) {
    mg::Tensor h = x;
    for (size_t i = 0; i < layers.size(); ++i) {
      h = mg::linear(h, layers[i].weight, layers[i].bias);
      if (i + 1 < layers.size()) h = mg::relu(h);
    }
    return h;
  };

  double first_loss = 0, last_loss = 0;
  std::printf("%6s %10s %9s\n", "step", "loss", "accuracy");
  for (int step = 0; step <= steps; ++step) {
    mg::Tensor logits = forward(data.x);
    mg::Tensor loss = mg::cross_entropy(logits, data.y);
    loss.backward();
    last_loss = loss.item<double>();
    if (step == 0) first_loss = last_loss;
    {
      mg::NoGradGuard no_grad;  // the update is not part of the graph
      for (Layer& l : layers)
        for (mg::Tensor* p : {&l.weight, &l.bias}) {
          p->add_(p->grad(), -lr);
          p->grad().zero_();
        }
      if (step % 50 == 0 || step == steps) {
        double accuracy = (mg::argmax(logits, 1) == data.y).to(mg::kFloat32).mean().item<double>();
        std::printf("%6d %10.4f %8.1f%%\n", step, last_loss, 100 * accuracy);
      }
    }
  }

  mg::MemoryStats s = mg::memory_stats();
  std::printf("\nmemory ledger (cpu), bytes:\n");
  std::printf("  %-15s %10s %10s %12s\n", "category", "current", "peak", "at peak");
  for (int c = 0; c < mg::kNumCategories; ++c)
    std::printf("  %-15s %10lld %10lld %12lld\n", mg::category_name(mg::Category(c)), (long long)s.by_category[c],
                (long long)s.peak_by_category[c], (long long)s.at_peak_by_category[c]);
  std::printf("  %-15s %10lld %10lld\n", "allocated", (long long)s.allocated, (long long)s.peak_allocated);
  std::printf("  %-15s %10lld %10lld\n", "reserved", (long long)s.reserved, (long long)s.peak_reserved);
  std::printf("  allocations %lld, cache hits %lld\n", (long long)s.num_allocs, (long long)s.cache_hits);
  // Exit non-zero when training did not work, so the example doubles as a test.
  return last_loss < 0.8 * first_loss ? 0 : 1;
}
