#include <memgrad/core/op.h>

#include <cstddef>

namespace mg {

const char* op_name(Op op) {
  static const char* const names[] = {
#define MG_OP(name) #name,
#include <memgrad/core/op_list.h>
      "custom", "none"};
  return names[size_t(op)];
}

}  // namespace mg
