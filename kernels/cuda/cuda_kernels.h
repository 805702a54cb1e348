// The CUDA backend's kernels (same contracts as the CPU ones), one family per .cu file; backend.cpp
// gathers them into the table. Plain C++ declarations, so backend.cpp builds without nvcc.
#pragma once
#include <memgrad/kernels/backend.h>

namespace mg::cuda {
using namespace mg::kernels;

#include <memgrad/kernels/backend_functions.h>

// cuDNN convolution (cudnn.cu): the Backend's optional direct conv2d entries.
bool conv2d(const Tensor& x, const Tensor& weight, const Tensor& out, const Conv2dGeometry& g, int64_t groups);
bool conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_x, const Conv2dGeometry& g,
                           int64_t groups);
bool conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_weight, const Conv2dGeometry& g,
                            int64_t groups);
}  // namespace mg::cuda
