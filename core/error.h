// Typed errors. Every failure the library detects raises an mg::Error subclass whose
// message names the op, what was expected and what was given.
#pragma once
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mg {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error {
  using Error::Error;
};  // incompatible shapes
class DTypeError : public Error {
  using Error::Error;
};  // wrong or unsupported dtype
class DeviceError : public Error {
  using Error::Error;
};  // device mismatch or unavailable
class IndexError : public Error {
  using Error::Error;
};  // dim or index out of range
class ValueError : public Error {
  using Error::Error;
};  // bad argument value
class AutogradError : public Error {
  using Error::Error;
};  // graph misuse
class MetaTensorError : public Error {
  using Error::Error;
};  // reading a meta tensor's values
class NotImplementedError : public Error {
  using Error::Error;
};  // op missing on a device
class IOError : public Error {
  using Error::Error;
};                     // files
struct Fragmentation;  // core/memory.h
// An allocation past the limit (or one the device refused). Raised by the allocator, it carries the
// fragmentation forensics of the moment: why the cached bytes could not serve the request.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
  // `message`, then the forensics' lines (Fragmentation::str()).
  OutOfMemoryError(const std::string& message, std::shared_ptr<const Fragmentation> forensics);
  // Null when the error was raised without forensics.
  const std::shared_ptr<const Fragmentation>& fragmentation() const { return fragmentation_; }

 private:
  std::shared_ptr<const Fragmentation> fragmentation_;
};
class MemoryBudgetError : public OutOfMemoryError {
  using OutOfMemoryError::OutOfMemoryError;
};  // a memory budget (core/budget/) below the minimum a step needs; the message names that minimum

namespace detail {
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail
}  // namespace mg

// MG_CHECK(cond, ErrorType, message parts...): throws ErrorType(concatenated parts).
#define MG_CHECK(cond, Err, ...)                            \
  do {                                                      \
    if (!(cond)) throw Err(::mg::detail::str(__VA_ARGS__)); \
  } while (0)
