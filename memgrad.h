// memgrad: a C++17 tensor library with reverse-mode autograd that shows, to the byte, where
// training memory goes. Include this one header for the whole public API.
//
// Embedding it: which state is shared and which is per thread.
// - Process-wide, safe to use from any thread: the memory ledger and its statistics, history and
//   peaks, one per device (core/memory.h); memory limits (set_memory_limit, MG_MEMORY_LIMIT); the
//   caching allocator's pools and empty_cache(); the selected kernel variants and the TF32 switch
//   (core/cuda.h); the default random generator (core/random.h: locked, so concurrent random ops
//   never share counters; pass your own Generator for an independent stream).
// - Per thread: grad mode (NoGradGuard), autocast (AutocastGuard), memory scopes (MemoryScope's
//   category and owner labels, OpScope), saved-tensor hooks, flop counters, kernel profiles, the
//   current CUDA stream.
// - Tensors themselves are not locked: two threads may read one tensor, but not write it while
//   another reads or writes it, and one autograd graph runs backward on one thread at a time.
#pragma once

#include <memgrad/amp/grad_scaler.h>
#include <memgrad/amp/master_weights.h>
#include <memgrad/autograd/checkpoint.h>
#include <memgrad/autograd/function.h>
#include <memgrad/autograd/gradcheck.h>
#include <memgrad/autograd/node.h>
#include <memgrad/core/autocast.h>
#include <memgrad/core/budget/budget.h>
#include <memgrad/core/cpu_isa.h>
#include <memgrad/core/cuda.h>
#include <memgrad/core/device.h>
#include <memgrad/core/dtype.h>
#include <memgrad/core/env.h>
#include <memgrad/core/error.h>
#include <memgrad/core/files.h>
#include <memgrad/core/flops.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/host_memory.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/memory/batch_size.h>
#include <memgrad/core/op.h>
#include <memgrad/core/profile.h>
#include <memgrad/core/random.h>
#include <memgrad/core/tensor.h>
#include <memgrad/core/variants.h>
#include <memgrad/data/dataset.h>
#include <memgrad/data/loader.h>
#include <memgrad/data/sampler.h>
#include <memgrad/data/tokens.h>
#include <memgrad/distributed/data_parallel.h>
#include <memgrad/distributed/parameter_units.h>
#include <memgrad/distributed/process_group.h>
#include <memgrad/nn/gpt.h>
#include <memgrad/nn/init.h>
#include <memgrad/nn/layers.h>
#include <memgrad/nn/loss.h>
#include <memgrad/nn/module.h>
#include <memgrad/nn/safetensors.h>
#include <memgrad/ops/ops.h>
#include <memgrad/optim/adafactor.h>
#include <memgrad/optim/adam.h>
#include <memgrad/optim/adam8bit.h>
#include <memgrad/optim/clip.h>
#include <memgrad/optim/in_backward.h>
#include <memgrad/optim/lion.h>
#include <memgrad/optim/optimizer.h>
#include <memgrad/optim/registry.h>
#include <memgrad/optim/scheduler.h>
#include <memgrad/optim/sgd.h>
#include <memgrad/plan/fits.h>
#include <memgrad/plan/planner.h>
#include <memgrad/plan/zero.h>
#include <memgrad/report/timeline.h>
#include <memgrad/train/model.h>
#include <memgrad/train/policy.h>
#include <memgrad/train/trainer.h>
