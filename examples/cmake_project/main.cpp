// Uses an installed memgrad: a tiny regression step, checked against its analytic gradient.
#include <cmath>
#include <cstdio>

#include <memgrad/memgrad.h>

int main() {
  // loss = mean((x w - y)^2) with x = [[1, 2], [3, 4]], y = [1, 2], w = [0.5, -0.5]
  auto x = mg::tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
  auto y = mg::tensor(std::vector<float>{1, 2}, {2});
  auto w = mg::tensor(std::vector<float>{0.5f, -0.5f}, {2}).requires_grad_();
  auto loss = mg::mse_loss(mg::matmul(x, w), y);
  loss.backward();
  // residuals r = x w - y = [-1.5, -2.5]; dL/dw = 2/2 * x^T r = [-9, -13]; loss = (2.25 + 6.25) / 2
  auto g = w.grad().to_vector<float>();
  bool ok =
      std::fabs(loss.item<float>() - 4.25f) < 1e-5f && std::fabs(g[0] + 9) < 1e-5f && std::fabs(g[1] + 13) < 1e-5f;
  std::printf("loss %.4f  dL/dw [%.4f, %.4f]  ledger peak %lld bytes  %s\n", loss.item<float>(), g[0], g[1],
              (long long)mg::memory_stats().peak_allocated, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
