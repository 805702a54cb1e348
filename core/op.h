// The identity of every op. Code that asks which op is running (checkpoint policies, the ledger's
// owner labels, autograd nodes, kernel error messages) compares Op values, so a misspelt op is a
// compile error rather than a policy that silently never matches. The ops are listed once, in
// op_list.h; op_name() gives the name users see (the function's name; in-place forms end in '_').
#pragma once
#include <cstdint>

namespace mg {

enum class Op : uint16_t {
#define MG_OP(name) name,
#include <memgrad/core/op_list.h>
  custom,  // a user's autograd function (autograd/function.h): its node carries the user's name
  none,    // no op: outside every OpScope
};

const char* op_name(Op op);

}  // namespace mg
