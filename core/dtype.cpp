#include <memgrad/core/dtype.h>

#include <ostream>

#include <memgrad/core/error.h>

namespace mg {

size_t dtype_size(DType t) {
  switch (t) {
    case kBool:
      return 1;
    case kFloat16:
    case kBFloat16:
      return 2;
    case kInt32:
    case kFloat32:
      return 4;
    case kInt64:
    case kFloat64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case kBool:
      return "bool";
    case kInt32:
      return "int32";
    case kInt64:
      return "int64";
    case kFloat16:
      return "float16";
    case kBFloat16:
      return "bfloat16";
    case kFloat32:
      return "float32";
    case kFloat64:
      return "float64";
  }
  return "?";
}

bool is_floating(DType t) { return t >= kFloat16; }
bool is_half(DType t) { return t == kFloat16 || t == kBFloat16; }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
  return a > b ? a : b;  // the enum is ordered bool < int32 < int64 < halfs < float32 < float64
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace mg
