// The CUDA backend's kernels (same contracts as the CPU ones), one family per .cu file; backend.cpp
// gathers them into the table. Plain C++ declarations, so backend.cpp builds without nvcc. The
// optional entries are cuDNN's convolutions (cudnn.cu); the scratch functions are in scratch.cpp.
#pragma once
#include <algorithm>

#include <memgrad/kernels/backend.h>

namespace mg::cuda {
using namespace mg::kernels;
#define MG_KERNEL(name, ret, ...) ret name(__VA_ARGS__);
#define MG_SCRATCH(name) ScratchOf<decltype(name)> name##_scratch;  // in scratch.cpp: built without nvcc too
#include <memgrad/kernels/kernel_list.h>

// layer_norm_backward's weight and bias sums split the rows of a tall input in this many slices, so
// that its [n / 32, slices] blocks outnumber a GPU's SMs (about 256 blocks; at least 256 rows per
// slice); with more than one, the slices' sums go through float scratch (layer_norm_backward_scratch).
inline int64_t layer_norm_wb_slices(int64_t rows, int64_t n) {
  const int64_t col_blocks = (n + 31) / 32;
  return std::max<int64_t>(1, std::min(256 / std::max<int64_t>(col_blocks, 1), rows / 256));
}
}  // namespace mg::cuda
