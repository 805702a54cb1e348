// The CPU backend's kernels, one family per file; backend.cpp gathers them into the table.
#pragma once
#include <memgrad/kernels/backend.h>

namespace mg::cpu {
using namespace mg::kernels;
#include <memgrad/kernels/backend_functions.h>
}  // namespace mg::cpu
