// memgrad: a C++17 tensor library with reverse-mode autograd that shows, to the byte, where
// training memory goes. Include this one header for the whole public API.
#pragma once

#include <memgrad/autograd/function.h>
#include <memgrad/autograd/grad_mode.h>
#include <memgrad/autograd/gradcheck.h>
#include <memgrad/autograd/node.h>
#include <memgrad/core/device.h>
#include <memgrad/core/dtype.h>
#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/ops.h>
#include <memgrad/core/random.h>
#include <memgrad/core/tensor.h>
