// Freeing tensors, and the cache behind them: `allocated` against `reserved`.
//
// A tensor's bytes go back to memgrad's caching allocator when its last handle goes away: the
// ledger's `allocated` drops at once, but the allocator keeps the segment it carved the block from
// (`reserved`), so that the next allocation of that size costs no trip to the device (cudaMalloc is
// slow and synchronises). empty_cache() hands back the segments that hold no live block. Segments
// are 2 MiB for requests up to 1 MiB, 20 MiB for requests up to 10 MiB, the request rounded to
// 2 MiB above that (PyTorch's layout); a block is carved from the best-fitting free piece.
//
// This program works with 4 MiB tensors (1 << 20 floats): five fit in one 20 MiB segment.
//
//   empty_cache      (no arguments)
#include <vector>

#include "ledger.h"

namespace {

constexpr int64_t MiB = int64_t(1) << 20;
int64_t allocated0 = 0, reserved0 = 0;

void show(const char* moment) {
  const mg::MemoryStats s = mg::memory_stats();
  std::printf("%-48s %10.0f MiB %10.0f MiB %10lld\n", moment, double(s.allocated - allocated0) / MiB,
              double(s.reserved - reserved0) / MiB, (long long)s.num_segments);
}
int64_t allocated() { return mg::memory_stats().allocated - allocated0; }
int64_t reserved() { return mg::memory_stats().reserved - reserved0; }
mg::Tensor four_mib() { return mg::empty({MiB}); }  // 1 Mi floats = 4 MiB, no values written

}  // namespace

int main() {
  mg::empty_cache();
  allocated0 = mg::memory_stats().allocated;
  reserved0 = mg::memory_stats().reserved;
  std::printf("%-48s %14s %14s %10s\n", "moment", "allocated", "reserved", "segments");
  show("start");

  std::vector<mg::Tensor> t;
  for (int i = 0; i < 10; ++i) t.push_back(four_mib());
  show("10 tensors of 4 MiB");
  demo::check_bytes(allocated(), 40 * MiB, "allocated: 10 x 4 MiB");
  demo::check_bytes(reserved(), 40 * MiB, "reserved: two 20 MiB segments");

  t.clear();
  show("all freed (t.clear())");
  demo::check_bytes(allocated(), 0, "allocated drops to 0 at once");
  demo::check_bytes(reserved(), 40 * MiB, "reserved stays: the segments are cached");

  for (int i = 0; i < 10; ++i) t.push_back(four_mib());
  show("10 tensors again: served from the cache");
  demo::check_bytes(reserved(), 40 * MiB, "no new segment");

  for (int i = 1; i < 10; i += 2) t[size_t(i)] = mg::Tensor();  // free every other tensor
  show("every other one freed: five 4 MiB holes");
  mg::Tensor big = mg::empty({2 * MiB});  // 8 MiB: no hole is large enough
  show("an 8 MiB tensor: a new segment");
  demo::check_bytes(allocated(), 28 * MiB, "allocated: 5 x 4 MiB + 8 MiB");
  demo::check_bytes(reserved(), 60 * MiB, "reserved: 20 MiB held in holes, so a third segment (fragmentation)");

  mg::empty_cache();
  show("empty_cache(): every segment holds a live block");
  demo::check_bytes(reserved(), 60 * MiB, "empty_cache returns nothing while each segment is in use");

  t.clear();
  big = mg::Tensor();
  show("all freed");
  mg::empty_cache();
  show("empty_cache()");
  demo::check_bytes(reserved(), 0, "empty_cache returns every segment once nothing lives in it");
  return demo::exit_code();
}
