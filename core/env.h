// The MG_* environment variables memgrad reads, each checked by one function and a bad value
// reported one way, in one short line: "MG_X=<value, cut to 48 characters>: <what is wrong>".
//
//   MG_ALLOC_CONF          the caching allocator's configuration (set_allocator_config)
//   MG_MEMORY_LIMIT        memory limits per device type (set_memory_limit)
//   MG_CPU_ISA             a lower CPU vector ISA level to run (cpu_isa)
//   MG_KERNEL_VARIANTS     kernel variants to select (set_kernel_variant)
//   MG_COLLECTIVE_TIMEOUT  seconds a collective may wait (distributed::collective_timeout)
//
// Where a call reads the value and can raise (MG_ALLOC_CONF, MG_MEMORY_LIMIT), a bad one is a
// ValueError. Where nothing can raise (while the library loads: MG_CPU_ISA, MG_KERNEL_VARIANTS; inside
// a collective's wait: MG_COLLECTIVE_TIMEOUT), it is said on stderr once, with "; ignored", and the
// default is kept. check_environment() raises for any of them: the memgrad command calls it before it
// starts, and stops with exit code 2.
#pragma once
#include <cstdio>
#include <optional>
#include <string>

namespace mg {

// ValueError with the message of the first MG_* variable above whose value is bad.
void check_environment();  // defined in core/check_environment.cpp, above what it checks

namespace env {

// `value` as a message shows it: control characters as '?', and past 48 characters cut, with its
// length ("aaaa... (100000 characters)"), so that a long or binary value is not echoed whole.
inline std::string shown(const std::string& value) {
  std::string s = value.substr(0, 48);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return value.size() <= 48 ? s : s + "... (" + std::to_string(value.size()) + " characters)";
}
// "NAME=<shown value>: <what>": the one form of a bad value's message.
inline std::string message(const char* name, const std::string& value, const std::string& what) {
  return std::string(name) + "=" + shown(value) + ": " + what;
}
// A bad value that nothing can raise for: said on stderr ("memgrad: <message>; ignored").
inline void warn_ignored(const std::string& message) {
  std::fprintf(stderr, "memgrad: %s; ignored\n", message.c_str());
}

// MG_COLLECTIVE_TIMEOUT's value: seconds, a finite number >= 0 (0: no timeout); nullopt when bad.
std::optional<double> parse_seconds(const std::string& value);
inline const char* const kSecondsExpected = "expected seconds, a finite number >= 0 (0: wait for ever)";

}  // namespace env
}  // namespace mg
