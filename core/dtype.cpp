#include <memgrad/core/dtype.h>

#include <ostream>

#include <memgrad/core/error.h>

namespace mg {

size_t dtype_size(DType t) {
  switch (t) {
    case kBool:
    case kUInt8:
    case kInt8:
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
    case kUInt8:
      return "uint8";
    case kInt8:
      return "int8";
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
  if ((a == kUInt8 && b == kInt8) || (a == kInt8 && b == kUInt8)) return kInt32;
  return a > b ? a : b;  // the enum is ordered bool < uint8 < int8 < int32 < int64 < halfs < float32 < float64
}

DType dtype_from_code(int64_t code) {
  MG_CHECK(code >= 0 && code <= int64_t(kFloat64), DTypeError, "expected a dtype code in [0, ", int(kFloat64),
           "] (bool 0, uint8 1, int8 2, int32 3, int64 4, float16 5, bfloat16 6, float32 7, float64 8), got ", code);
  return DType(code);
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace mg
