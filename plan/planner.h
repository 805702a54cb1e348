// The memory planner. A plan runs training steps on the meta device, where the ledger and the
// caching allocator behave exactly as on a real device but no bytes exist, and states two numbers
// for the steady-state step, both to the byte: the allocated peak and the reserved peak (the
// segments the caching allocator holds). A plan is made for a device: meta books the scratch that
// device's kernels allocate (core/device.h: meta_target). Anything compared with a budget (the
// largest batch, automatic checkpointing, out-of-memory advice) asks whether the steps run under a
// memory limit of that size, which is the reserved bytes.
//
// Any program can be planned: a Program builds a model (and optimizer, data, ...) on the device it is
// given and returns one training step. The built-in models (an MLP and a GPT, ModelSpec) are such
// programs. Checkpoint segments are chosen over a chain of blocks that the program runs through
// run_chain (an nn::Sequential, a ModuleList, or any list of blocks).
//
// The steady state: the first step creates the optimizer's state lazily, so later steps start with
// it. The planner runs steps until the allocator's layout after a step repeats an earlier one (from
// then on every step allocates, frees and reuses exactly as before) and reports the last step; the
// reserved peak is the largest over all the steps run, since a memory limit must hold them all.
//
// What a plan runs comes from train/ (the folder below): the checkpoint policies and the chains of
// blocks they apply to (train/policy.h), the precision, optimizer and data-parallel options and the
// Trainer that runs a step (train/trainer.h), the built-in models (train/model.h).
//
// The planner's parts, one header per concept (this header includes them all):
//   plan.h      programs, plan options, StepReport, plan(), measure(), fits()
//   model.h     the built-in models' programs, plans and StepRunner
//   segments.h  per-block costs and the choice of checkpoint segments under a budget
//   batch.h     the largest batch under a budget
//   timed.h     plans timed by a cost model: a plan under the budget runtime, on meta and on the device
//   mixed.h     the fastest of the timed plans that keep, recompute or offload under a budget; the memory-time curve
//   per_tensor.h  the per-tensor plan: keep, offload or recompute each saved tensor, by an ILP
#pragma once
#include <memgrad/plan/batch.h>
#include <memgrad/plan/mixed.h>
#include <memgrad/plan/model.h>
#include <memgrad/plan/per_tensor.h>
#include <memgrad/plan/plan.h>
#include <memgrad/plan/segments.h>
#include <memgrad/plan/timed.h>
