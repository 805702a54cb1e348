// The CUDA backend's kernels (same contracts as the CPU ones), one family per .cu file; backend.cpp
// gathers them into the table. Plain C++ declarations, so backend.cpp builds without nvcc.
#pragma once
#include <memgrad/kernels/backend.h>

namespace mg::cuda {
using namespace mg::kernels;

#include <memgrad/kernels/backend_functions.h>
}  // namespace mg::cuda
