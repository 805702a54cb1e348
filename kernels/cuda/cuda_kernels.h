// The CUDA backend's kernels (same contracts as the CPU ones), one family per .cu file; backend.cpp
// gathers them into the table. Plain C++ declarations, so backend.cpp builds without nvcc. The
// optional entries are cuDNN's convolutions (cudnn.cu); the scratch functions are in scratch.cpp.
#pragma once
#include <memgrad/kernels/backend.h>

namespace mg::cuda {
using namespace mg::kernels;
#define MG_KERNEL(name, ret, ...) ret name(__VA_ARGS__);
#define MG_SCRATCH(name) ScratchOf<decltype(name)> name##_scratch;  // in scratch.cpp: built without nvcc too
#include <memgrad/kernels/kernel_list.h>
}  // namespace mg::cuda
