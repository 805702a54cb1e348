// Expandable segments and address space: under a memory limit a segment reserves twice the limit
// (not the machine's memory and an eighth), on the cpu and on meta alike; under a limit on the
// process's address space (ulimit -v) smaller ranges are reserved, and a refusal is reported as one.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>

#include "layout_check.h"

using namespace mg;
using namespace layout_check;

namespace {

struct Expandable {
  bool before;
  Expandable() : before(allocator_config().expandable_segments) { set_allocator_config("expandable_segments:True"); }
  ~Expandable() { set_allocator_config(before ? "expandable_segments:True" : "expandable_segments:False"); }
};

// The bytes of address space this process has mapped (/proc/self/statm's first field).
size_t mapped_bytes() {
  long pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return size_t(pages) * size_t(::sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST_CASE("address space: under a memory limit an expandable segment reserves twice the limit, cpu and meta") {
  Expandable on;
  for (const Device& d : {kCPU, kMeta}) {
    CAPTURE(d.str());
    IsolatedAllocator fresh(d, 8 * MiB);
    Blocks b(d);
    b.get(3 * MiB);
    b.get(KiB);  // the small pool's segment too
    const auto segments = memory_segments(d);
    REQUIRE(segments.size() == 2);
    for (const SegmentInfo& s : segments) {
      CHECK(s.expandable);
      CHECK(s.virtual_size == 16 * MiB);  // was the machine's memory and an eighth (cpu), 2^46 (meta)
    }
  }
}

TEST_CASE("address space: under ulimit -v smaller ranges are reserved; a refusal says it is address space") {
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // checks in a process of its own, whose address space is then limited
    Expandable on;
    IsolatedAllocator fresh(kCPU);
    const rlimit limit{mapped_bytes() + 256 * size_t(MiB), RLIM_INFINITY};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(10);
    Block* small = nullptr;
    try {  // a range of the machine's memory would not fit in 256 MiB: a smaller one does
      small = memory::allocate(kCPU, 128 * KiB, Category::Parameter);
    } catch (const OutOfMemoryError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      ::_exit(11);
    }
    try {  // 1 GiB of address space cannot be had at all
      memory::allocate(kCPU, size_t(1024) * MiB, Category::Parameter);
      ::_exit(12);
    } catch (const OutOfMemoryError& e) {
      const std::string what = e.what();
      std::fprintf(stderr, "%s\n", what.c_str());
      if (what.find("the system refused 1.00 GiB") == std::string::npos ||
          what.find("of address space for a new expandable segment") == std::string::npos ||
          what.find("ulimit -v") == std::string::npos)
        ::_exit(13);
    }
    memory::release(small);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 11: the first request failed; 12: 1 GiB was granted; 13: the message
}
