// expect_error<Err>(f, parts): `f` must throw exactly Err (not only a base class) with a message
// containing every one of `parts`; afterwards nothing has leaked in the ledger (cpu and meta) and
// ops and autograd still work. Shared by the suites that feed the library bad input.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <typeinfo>
#include <vector>

#include <memgrad/memgrad.h>

inline int64_t allocated() { return mg::memory_stats(mg::kCPU).allocated; }
inline int64_t meta_allocated() { return mg::memory_stats(mg::kMeta).allocated; }

// Runs `f`, which must throw exactly Err (not only a base class) whose message contains every
// one of `parts`; then checks that nothing leaked and that ops still work.
template <class Err>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  const int64_t before = allocated(), meta_before = meta_allocated();
  std::string what;
  bool right_type = false;
  try {
    f();
  } catch (const Err& e) {
    right_type = typeid(e) == typeid(Err);
    what = e.what();
  } catch (const std::exception& e) {
    what = std::string("wrong exception type: ") + e.what();
  }
  INFO("message: " << what);
  CHECK(right_type);
  for (auto& p : parts) CHECK_MESSAGE(what.find(p) != std::string::npos, "missing '" << p << "'");
  CHECK(allocated() == before);
  CHECK(meta_allocated() == meta_before);
  auto x = mg::ones({3}).requires_grad_();
  auto y = (x * 2.0).sum();
  y.backward();
  CHECK(y.item<float>() == 6);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
}
