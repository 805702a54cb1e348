// core/env.h: every MG_* variable the library reads is checked one way, and a bad value is one short
// line naming the variable, its value cut short.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <memgrad/core/cpu_isa_impl.h>

#include "expect_error.h"

using namespace mg;

namespace {

// Sets (or, with nullptr, unsets) an environment variable for a scope.
struct Env {
  std::string name;
  Env(const char* n, const char* value) : name(n) {
    if (value)
      ::setenv(n, value, 1);
    else
      ::unsetenv(n);
  }
  ~Env() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("env: a bad value is one short line naming the variable, its value cut short") {
  CHECK(env::shown("avx2") == "avx2");
  CHECK(env::shown("a\nb") == "a?b");
  const std::string long_value(100000, 'x');
  const std::string shown = env::shown(long_value);
  CHECK(shown.size() < 80);
  CHECK(shown.find("(100000 characters)") != std::string::npos);
  check_environment();  // the test's own environment is fine
  const std::vector<std::tuple<const char*, std::string, std::string>> cases = {
      {"MG_COLLECTIVE_TIMEOUT", "abc", "expected seconds"},
      {"MG_COLLECTIVE_TIMEOUT", "-1", "expected seconds"},
      {"MG_COLLECTIVE_TIMEOUT", "inf", "expected seconds"},
      {"MG_KERNEL_VARIANTS", "garbage", "not device:op=variant"},
      {"MG_KERNEL_VARIANTS", "gpu:matmul=eigen", "not device:op=variant"},
      {"MG_KERNEL_VARIANTS", "cpu:no_such_op=x", "has no kernel 'no_such_op'"},
      {"MG_KERNEL_VARIANTS", "cpu:matmul=fastest", "has no variant 'fastest'"},
      {"MG_CPU_ISA", "bogus", "expected baseline, avx2 or avx512"},
      {"MG_MEMORY_LIMIT", "lots", "expected a byte count"},
      {"MG_MEMORY_LIMIT", "gpu=1G", "expected a device type"},
  };
  for (const auto& c : cases) {
    const char* name = std::get<0>(c);  // (a lambda cannot capture a binding)
    const std::string &value = std::get<1>(c), &message = std::get<2>(c);
    CAPTURE(name);
    CAPTURE(value);
    Env e(name, value.c_str());
    expect_error<ValueError>([] { check_environment(); }, {std::string(name) + "=" + value + ": ", message});
  }
  {
    Env e("MG_KERNEL_VARIANTS", "cpu:matmul=eigen,");
    check_environment();
  }
  // A long value is shown once, cut short.
  Env e("MG_MEMORY_LIMIT", long_value.c_str());
  try {
    check_environment();
    FAIL("expected a ValueError");
  } catch (const ValueError& error) {
    const std::string what = error.what();
    CHECK(what.size() < 200);
    CHECK(what.find("MG_MEMORY_LIMIT=xxx") == 0);
  }
  expect_error<ValueError>([&] { set_allocator_config(long_value); }, {"(100000 characters)", "unknown key"});
}

TEST_CASE("cpu isa: a level the build left out (MG_CPU_LEVELS=host) runs the highest compiled below it") {
  using detail::highest_built_level;
  constexpr CpuIsa B = CpuIsa::Baseline, A2 = CpuIsa::AVX2, A5 = CpuIsa::AVX512;
  for (bool avx2 : {false, true})
    for (bool avx512 : {false, true}) {
      CAPTURE(avx2);
      CAPTURE(avx512);
      CHECK(highest_built_level(B, avx2, avx512) == B);
      CHECK(highest_built_level(A2, avx2, avx512) == (avx2 ? A2 : B));
      CHECK(highest_built_level(A5, avx2, avx512) == (avx512 ? A5 : avx2 ? A2 : B));
    }
  // This build's answer: a level it has, never above the CPU's (or MG_CPU_ISA's).
  CHECK(cpu_kernels_isa() <= cpu_isa());
}
