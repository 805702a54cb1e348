// Shared by the programs in examples/memory/: read the memory ledger, print small tables, and
// check a claim about the bytes. Every program ends with `return demo::exit_code();`, which is
// non-zero when any claim failed, so each program doubles as a test (ctest label `unit`).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include <memgrad/memgrad.h>

namespace demo {

// Bytes of category `c` held on `d` now, and that category's peak since the last reset_peak.
inline int64_t now(mg::Category c, const mg::Device& d = mg::kCPU) { return mg::memory_stats(d).category(c); }
inline int64_t peak(mg::Category c, const mg::Device& d = mg::kCPU) { return mg::memory_stats(d).peak(c); }

// "8192 B (8.00 KiB)": exact bytes first, the readable size after.
inline std::string bytes(int64_t b) { return std::to_string(b) + " B (" + mg::format_bytes(b) + ")"; }

inline int& failures() {
  static int n = 0;
  return n;
}
// Prints the claim with [ok] or [FAILED]; a failed claim makes exit_code() non-zero.
inline void check(bool ok, const std::string& claim) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", claim.c_str());
  if (!ok) ++failures();
}
// The same for an exact byte count: prints what was measured and what the hand arithmetic says.
inline void check_bytes(int64_t measured, int64_t expected, const std::string& what) {
  std::string claim =
      what + ": measured " + std::to_string(measured) + " B, by hand " + std::to_string(expected) + " B";
  check(measured == expected, claim);
}
inline int exit_code() {
  if (failures()) std::printf("%d claim(s) FAILED\n", failures());
  return failures() ? 1 : 0;
}

}  // namespace demo
