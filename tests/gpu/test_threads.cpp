// The CUDA backend from several host threads at once, each on a stream of its own: the shared pieces
// (the cuBLAS handle, the index checks' device flags) must serve one thread at a time, or a product
// lands on another thread's stream, or one thread's out-of-range index is reported to another.
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu_util.h"

using namespace gpu_test;

namespace {
constexpr int kThreads = 4, kRounds = 40;

// Runs body(thread, round) on kThreads threads, each with its own non-blocking stream; the failures
// each thread saw (messages), checked back on the test's thread.
template <class Body>
std::vector<std::string> on_threads(Body body) {
  std::vector<std::string> failures;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cuda::StreamGuard own(cuda::Stream::create(0));
      for (int round = 0; round < kRounds; ++round) {
        std::string failure = body(t, round);
        if (failure.empty()) continue;
        std::lock_guard<std::mutex> g(mu);
        failures.push_back("thread " + std::to_string(t) + ", round " + std::to_string(round) + ": " + failure);
      }
      cuda::current_stream(0).synchronize();
    });
  for (std::thread& th : threads) th.join();
  return failures;
}
}  // namespace

TEST_CASE("cuda threads: matmuls on four threads and streams match the cpu (one cuBLAS handle, locked)") {
  manual_seed(3);
  std::vector<Tensor> a, b, want;
  for (int t = 0; t < kThreads; ++t) {
    a.push_back(randn({96 + t, 160}));
    b.push_back(randn({160, 72}));
    want.push_back(matmul(a.back(), b.back()));
  }
  const auto failures = on_threads([&](int t, int) -> std::string {
    Tensor got = matmul(a[size_t(t)].to(kGPU), b[size_t(t)].to(kGPU)).to(kCPU);
    const double err = (got - want[size_t(t)]).abs().max().item<double>();
    return err < 1e-3 ? "" : "max error " + std::to_string(err);
  });
  for (const std::string& f : failures) FAIL_CHECK(f);
  CHECK(failures.empty());
}

TEST_CASE("cuda threads: index checks on four threads and streams report each thread's own fault") {
  Tensor table = randn({100, 8}).to(kGPU);
  const auto failures = on_threads([&](int t, int round) -> std::string {
    std::vector<int64_t> idx(4096, 7);
    const bool bad = (t + round) % 2 == 0;
    const int64_t at = 512 * t + round, value = 100 + t;  // a position and a value of this thread's own
    if (bad) idx[size_t(at)] = value;
    try {
      index_select(table, 0, tensor(idx).to(kGPU));
      return bad ? "no IndexError" : "";
    } catch (const IndexError& e) {
      const std::string expect = "got " + std::to_string(value) + " at position " + std::to_string(at);
      if (!bad) return std::string("IndexError on good indices: ") + e.what();
      return std::string(e.what()).find(expect) != std::string::npos ? "" : std::string("wrong report: ") + e.what();
    }
  });
  for (const std::string& f : failures) FAIL_CHECK(f);
  CHECK(failures.empty());
}
