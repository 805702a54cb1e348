// The distributed suite's own main. Run alone it runs every test case except those tagged [mpi];
// run under `mpirun -np 2` (the ctest entry distributed_mpi) it runs only the [mpi] ones, on every
// rank, and fails when any rank failed. Ranks other than 0 report failures only. Built without
// MPI, `--mpi` (what distributed_mpi passes) exits 77: ctest reports the entry as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include <memgrad/distributed/process_group.h>

int main(int argc, char** argv) {
  namespace dist = mg::distributed;
  bool mpi = false;
  for (int i = 1; i < argc; ++i) mpi = mpi || std::strcmp(argv[i], "--mpi") == 0;
  if (mpi && !dist::mpi_built()) {
    std::printf("distributed_mpi SKIPPED: memgrad was built without MPI (install libopenmpi-dev)\n");
    return 77;
  }
  if (mpi && dist::launched_world_size() < 2) {
    std::printf("distributed_mpi: expected to run under mpirun -np 2 (or more), got 1 process\n");
    return 1;
  }
  doctest::Context context(argc, argv);
  if (mpi) {
    context.addFilter("test-case", "*[mpi]*");
    context.setOption("no-colors", true);
    if (dist::world().rank() != 0) context.setOption("minimal", true);
  } else {
    context.addFilter("test-case-exclude", "*[mpi]*");
  }
  int rc = context.run();
  if (context.shouldExit()) return rc;
  if (mpi) rc = int(dist::world().all_reduce(double(rc), dist::ReduceOp::Max));
  return rc;
}
