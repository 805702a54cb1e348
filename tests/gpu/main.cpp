// The gpu suite's own main: without a CUDA device it runs only the checks tagged [no-gpu] (the
// kernel table, the variant registry, errors that name the missing device), prints why the
// rest is skipped and exits 77, which ctest reports as "skipped" for this suite.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <memgrad/core/cuda/runtime_impl.h>
#include <memgrad/core/device.h>

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const bool gpu = mg::cuda_available();
  if (!gpu) context.addFilter("test-case", "*[no-gpu]*");
  int rc = context.run();
  if (context.shouldExit() || rc != 0 || gpu) return rc;
  std::printf("gpu suite SKIPPED: no usable CUDA device (%s); only the [no-gpu] checks ran\n",
              mg::cuda_built() ? mg::cuda::last_error().c_str() : "memgrad was built without CUDA");
  return 77;
}
