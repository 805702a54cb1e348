#include <memgrad/core/env.h>

#include <cmath>
#include <cstdlib>

namespace mg {

std::optional<double> env::parse_seconds(const std::string& value) {
  char* end = nullptr;
  const double x = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(x) || !(x >= 0) ||
      value.find_first_not_of("0123456789+-.eE") != std::string::npos)  // decimal only: not 0x10, not " 5"
    return std::nullopt;
  return x;
}

}  // namespace mg
