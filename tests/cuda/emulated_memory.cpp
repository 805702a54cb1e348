// The memory side of emulated_device.h: device allocations with red zones, each block's shared
// arena, and the checks of every access the kernels' code makes (memcheck, racecheck, initcheck).
// The accesses arrive through compiler instrumentation of the test sources (tests/CMakeLists.txt):
// ThreadSanitizer's calls (__tsan_read4, ...) from GCC or clang, or SanitizerCoverage's
// (__sanitizer_cov_load4, ...) from clang where AddressSanitizer is on; this file is built without it.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "emulated_internal.h"

namespace emu {
namespace detail {
namespace {

constexpr size_t kRedZone = 256;  // around each allocation: keeps 256-byte alignment, as cudaMalloc's
constexpr unsigned char kPoison = 0xff;

struct Allocation {
  const char *data, *end;            // what the kernel may touch
  std::vector<unsigned char> valid;  // per byte: it holds a value (a copy, a kernel's write)
  std::string name;
};
std::map<const char*, Allocation> g_allocations;  // by the first byte of the red zone before the data
Allocation* g_last = nullptr;                     // the one the last access hit

// ---- the shared arena: the dynamic part at 0, then each static array as a block first touches it,
// red zones between; a byte's shadow says who wrote and read it in the current barrier interval.
constexpr size_t kArenaBytes = 256 * 1024, kSharedGap = 64;
constexpr uint16_t kSeveral = 0xffff;
struct Region {
  const SharedDecl* decl;  // null: the dynamic part
  size_t begin, end;
};
struct Shadow {
  uint64_t interval = 0;  // the barrier interval writer and reader belong to
  uint64_t block = 0;     // the block that last wrote the byte (initcheck)
  uint32_t writer_epoch = 0, reader_epoch = 0;
  uint16_t writer = 0, reader = 0;  // linear thread + 1; 0 none, kSeveral
  bool atomic = false;              // the write was an atomic
};
struct Shared {
  unsigned char* arena = static_cast<unsigned char*>(std::aligned_alloc(256, kArenaBytes));
  std::vector<Shadow> shadow = std::vector<Shadow>(kArenaBytes);
  std::vector<Region> regions;
  size_t used = 0;                   // bytes handed out in this block, red zones included
  uint64_t interval = 1;             // counts every barrier of every block
  uint64_t block = 0;                // counts blocks
  std::vector<uint32_t> warp_epoch;  // __syncwarps per warp, in this block
};
Shared& shared() {
  static Shared* s = new Shared();  // never destroyed: kernels may run from static destructors' callers
  return *s;
}

std::string region_name(const Region& r) {
  return r.decl ? "shared '" + std::string(r.decl->name) + "'" : std::string("dynamic shared memory");
}
std::string access_name(Access kind) {
  return kind == Access::Read ? "read" : kind == Access::Write ? "write" : "atomic";
}

// ---- memcheck
Allocation* allocation_near(const char* p) {
  auto it = g_allocations.upper_bound(p);
  if (it == g_allocations.begin()) return nullptr;
  --it;
  return p < it->second.end + kRedZone ? &it->second : nullptr;
}

// initcheck on global memory: a read (or an atomic, which reads) of bytes without a value.
void check_valid(Allocation& a, const char* p, size_t bytes, Access kind) {
  unsigned char* v = a.valid.data() + (p - a.data);
  if (kind != Access::Write)
    for (size_t k = 0; k < bytes; ++k)
      if (!v[k]) {
        report("initcheck", "read of '" + a.name + "' + " + std::to_string(p - a.data + int64_t(k)) +
                                ", which no copy or kernel has written");
        break;
      }
  if (kind != Access::Read) std::memset(v, 1, bytes);
}

void check_global(const char* p, size_t bytes, Access kind) {
  if (g_last && p >= g_last->data && p + bytes <= g_last->end) return check_valid(*g_last, p, bytes, kind);
  Allocation* a = allocation_near(p);
  if (a && p >= a->data && p + bytes <= a->end) {
    g_last = a;
    return check_valid(*a, p, bytes, kind);
  }
  std::string what = "invalid global " + access_name(kind) + " of " + std::to_string(bytes) + " bytes";
  if (!a)
    what += " at " + std::to_string(reinterpret_cast<uintptr_t>(p)) + ", in no device allocation";
  else if (p < a->data)
    what += ", " + std::to_string(a->data - p) + " bytes before '" + a->name + "'";
  else
    what += " at '" + a->name + "' + " + std::to_string(p - a->data) + ", past its end (" +
            std::to_string(a->end - a->data) + " bytes)";
  report("memcheck", what);
}

// ---- racecheck and initcheck on the shared arena
bool synced(uint16_t other, uint32_t epoch, const ThreadInfo& t, const Shared& s) {
  const unsigned w = unsigned(other - 1) / 32;  // threads of one warp are ordered by its __syncwarps
  return w == t.warp && s.warp_epoch[w] != epoch;
}

bool hazard(const char* kind, const Region& r, size_t at, uint16_t other, const ThreadInfo& t) {
  report("racecheck", std::string(kind) + " hazard on " + region_name(r) + " + " + std::to_string(at - r.begin) +
                          ": threads " + std::to_string(other - 1) + " and " + std::to_string(t.linear) +
                          " (linear ids) in one barrier interval");
  return true;
}

// Whether the access found a fault (then the access's other bytes are not checked).
bool check_shared_byte(Shared& s, const Region& r, size_t at, Access kind, const ThreadInfo& t, bool unwritten) {
  Shadow& b = s.shadow[at];
  const uint16_t me = uint16_t(t.linear + 1);
  if (b.interval != s.interval) b = Shadow{s.interval, b.block, 0, 0, 0, 0, false};
  const uint32_t epoch = s.warp_epoch[t.warp];
  bool found = false;
  if (kind == Access::Read) {
    if (unwritten) {
      report("initcheck", "read of " + region_name(r) + " + " + std::to_string(at - r.begin) +
                              ", which no thread of the block has written");
      found = true;
    }
    if (b.writer && b.writer != me && !synced(b.writer, b.writer_epoch, t, s))
      found = hazard("read-after-write", r, at, b.writer, t);
    if (b.reader == 0)
      b.reader = me, b.reader_epoch = epoch;
    else if (b.reader != me)
      b.reader = kSeveral;
    return found;
  }
  const bool both_atomic = kind == Access::Atomic && b.atomic;
  if (b.writer && b.writer != me && !both_atomic && !synced(b.writer, b.writer_epoch, t, s))
    found = hazard("write-after-write", r, at, b.writer, t);
  else if (b.reader == kSeveral || (b.reader && b.reader != me && !synced(b.reader, b.reader_epoch, t, s)))
    found = hazard("write-after-read", r, at, b.reader == kSeveral ? me : b.reader, t);
  b.writer = me, b.writer_epoch = epoch, b.atomic = kind == Access::Atomic, b.block = s.block;
  return found;
}

void check_shared(Shared& s, size_t off, size_t bytes, Access kind, const ThreadInfo& t) {
  for (const Region& r : s.regions) {
    if (off < r.begin || off >= r.end) continue;
    if (off + bytes > r.end) break;
    // initcheck: no byte of the access written (a struct's copy reads its padding too)
    bool unwritten = kind == Access::Read;
    for (size_t k = 0; k < bytes && unwritten; ++k) unwritten = s.shadow[off + k].block != s.block;
    for (size_t k = 0; k < bytes; ++k)
      if (check_shared_byte(s, r, off + k, kind, t, unwritten && k == 0)) break;
    return;
  }
  std::string what = "invalid shared " + access_name(kind) + " of " + std::to_string(bytes) + " bytes at offset " +
                     std::to_string(off) + " of the block's shared memory";
  for (const Region& r : s.regions)
    if (off >= r.end && off < r.end + kSharedGap)
      what += ", " + std::to_string(off - r.begin) + " bytes into " + region_name(r) + " of " +
              std::to_string(r.end - r.begin);
  report("memcheck", what);
}

}  // namespace

void* device_alloc(size_t bytes, size_t reserved, size_t initialized, const char* name) {
  const size_t total = bytes + reserved, padded = (total + kRedZone - 1) / kRedZone * kRedZone;
  char* lo = static_cast<char*>(std::aligned_alloc(kRedZone, 2 * kRedZone + padded));
  std::memset(lo, 0xfd, kRedZone);
  std::memset(lo + kRedZone, kPoison, bytes);
  std::memset(lo + kRedZone + bytes, 0, reserved);
  std::memset(lo + kRedZone + total, 0xfd, kRedZone);
  Allocation a{lo + kRedZone, lo + kRedZone + total, std::vector<unsigned char>(total, 0), name};
  std::fill(a.valid.begin(), a.valid.begin() + int64_t(initialized), 1);
  std::fill(a.valid.begin() + int64_t(bytes), a.valid.end(), 1);
  g_allocations[lo] = std::move(a);
  return lo + kRedZone;
}

void device_free(void* p) {
  if (!p) return;
  char* lo = static_cast<char*>(p) - kRedZone;
  g_last = nullptr;
  g_allocations.erase(lo);
  std::free(lo);
}

void set_warps(unsigned warps) { shared().warp_epoch.assign(warps, 0); }

void shared_begin_block(size_t dynamic_bytes) {
  Shared& s = shared();
  std::memset(s.arena, kPoison, dynamic_bytes);  // the static arrays are poisoned as they are handed out
  s.regions.assign(1, Region{nullptr, 0, dynamic_bytes});
  s.used = (dynamic_bytes + kSharedGap + 15) / 16 * 16;
  ++s.block;
  ++s.interval;
  std::fill(s.warp_epoch.begin(), s.warp_epoch.end(), 0);
}

void shared_barrier() { ++shared().interval; }
void shared_warp_sync(unsigned warp) { ++shared().warp_epoch[warp]; }

void check_access(const void* ptr, size_t bytes, Access kind) {
  const char* p = static_cast<const char*>(ptr);
  const ThreadInfo& t = *g_checked;
  if (p >= t.stack_lo && p < t.stack_hi) return;  // its registers and local memory
  Unchecked unchecked;
  Shared& s = shared();
  const size_t off = size_t(p - reinterpret_cast<const char*>(s.arena));
  if (off < kArenaBytes) return check_shared(s, off, bytes, kind, t);
  check_global(p, bytes, kind);
}

}  // namespace detail

void* static_shared(const SharedDecl* decl) {
  detail::Unchecked unchecked;
  detail::Shared& s = detail::shared();
  for (const detail::Region& r : s.regions)
    if (r.decl == decl) return s.arena + r.begin;
  const size_t align = std::max<size_t>(decl->align, 16), begin = (s.used + align - 1) / align * align;
  if (begin + decl->bytes + detail::kSharedGap > detail::kArenaBytes)
    throw LaunchError("emu: static shared memory past the emulator's arena");
  s.regions.push_back(detail::Region{decl, begin, begin + decl->bytes});
  s.used = begin + decl->bytes + detail::kSharedGap;
  std::memset(s.arena + begin, detail::kPoison, decl->bytes);
  return s.arena + begin;
}

unsigned char* dynamic_shared() { return detail::shared().arena; }

}  // namespace emu
