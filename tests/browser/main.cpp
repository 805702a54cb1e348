// The browser suite's own main: without a browser to run (Debian's chromium; scripts/test.sh
// installs it as root) it says so and exits 77, which ctest reports as "skipped".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "browser.h"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  if (browser::find_chromium().empty()) {
    std::printf(
        "browser suite SKIPPED: no chromium on the PATH (as root scripts/test.sh installs Debian's chromium; or "
        "`apt-get install chromium`, or set MG_CHROMIUM to a Chromium or Chrome binary)\n");
    return 77;
  }
  return context.run();
}
