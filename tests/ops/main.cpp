// The ops suite's main: doctest, or `test_ops --dump-cases FILE`, which writes the case list with its
// inputs for tests/reference/make_fixtures.py.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ops/op_case.h"

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--dump-cases")) {
      std::ofstream out(argv[i + 1]);
      out << mg::optest::dump_cases().dump() << "\n";
      if (!out) {
        std::fprintf(stderr, "test_ops: cannot write %s\n", argv[i + 1]);
        return 1;
      }
      return 0;
    }
  return doctest::Context(argc, argv).run();
}
